// CPU reference of softmax and log-softmax, forward and backward: float64
// arithmetic, the row maximum subtracted before exponentiation.
#include "cpu/cpu_common.hpp"
#include "cpu/cpu_ops.hpp"

namespace xvk::cpu {
namespace {

// Offset of row r's mask row, per the broadcast description in the args.
int64_t mask_offset(const xvk_softmax_forward_args &a, int64_t r) {
  int64_t offset = 0;
  for (int k = 0; k < a.mask_ndim; ++k) {
    offset += (r % a.mask_shape[k]) * a.mask_stride[k];
    r /= a.mask_shape[k];
  }
  return offset;
}

// Columns [0, limit) of row r survive the causal mask.
int64_t causal_limit(const xvk_softmax_forward_args &a, int64_t r) {
  if (a.causal == XVK_CAUSAL_NONE) return a.cols;
  const int64_t q = r % a.causal_rows;
  const int64_t limit = q + 1 + (a.causal == XVK_CAUSAL_BOTTOM_RIGHT ? a.cols - a.causal_rows : 0);
  return limit < 0 ? 0 : limit > a.cols ? a.cols : limit;
}

template <class T>
void forward(const xvk_softmax_forward_args &a) {
  const int64_t cols = a.cols;
  std::vector<double> scratch(size_t(max_threads()) * size_t(cols));
  parallel_for(a.rows, a.rows * cols, [&](int64_t r) {
    double *z = scratch.data() + size_t(thread_id()) * size_t(cols);
    const T *x = row_of<T>(a.x, r);
    const T *mask = a.mask ? static_cast<const T *>(a.mask) + mask_offset(a, r) : nullptr;
    const int64_t limit = causal_limit(a, r);
    double max = -kInf;
    bool nan = false;
    for (int64_t j = 0; j < cols; ++j) {
      double v = -kInf;
      if (j < limit) v = double(a.scale) * to_float(x[j]) + (mask ? double(to_float(mask[j])) : 0.0);
      z[j] = v;
      nan |= std::isnan(v);
      if (v > max) max = v;
    }
    T *y = mutable_row_of<T>(a.y, r);
    if (nan || max == -kInf) {  // a NaN poisons the row; a fully masked row is 0 (log: -inf)
      const double fill = nan ? kNaN : a.log ? -kInf : 0.0;
      for (int64_t j = 0; j < cols; ++j) y[j] = store<T>(fill);
      return;  // on to the next row
    }
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(z[j] - max);
    const double log_sum = std::log(sum);
    for (int64_t j = 0; j < cols; ++j)
      y[j] = store<T>(a.log ? z[j] - max - log_sum : std::exp(z[j] - max) / sum);
  });
}

template <class T>
void backward(const xvk_softmax_backward_args &a) {
  parallel_for(a.rows, a.rows * a.cols, [&](int64_t r) {
    const T *y = row_of<T>(a.y, r);
    const T *dy = row_of<T>(a.dy, r);
    double reduce = 0;  // softmax: sum(dy * y); log-softmax: sum(dy)
    for (int64_t j = 0; j < a.cols; ++j)
      reduce += a.log ? double(to_float(dy[j])) : double(to_float(dy[j])) * to_float(y[j]);
    T *dx = mutable_row_of<T>(a.dx, r);  // may be y or dy: each element is read before it is written
    for (int64_t j = 0; j < a.cols; ++j) {
      const double yj = to_float(y[j]), dyj = to_float(dy[j]);
      const double g = a.log ? dyj - std::exp(yj) * reduce : yj * (dyj - reduce);
      dx[j] = store<T>(double(a.scale) * g);
    }
  });
}

}  // namespace

xvk_status_t softmax_forward(void *, const xvk_softmax_forward_args *args) {
  dispatch(args->dtype, [&](auto tag) { forward<decltype(tag)>(*args); });
  return XVK_SUCCESS;
}

xvk_status_t softmax_backward(void *, const xvk_softmax_backward_args *args) {
  dispatch(args->dtype, [&](auto tag) { backward<decltype(tag)>(*args); });
  return XVK_SUCCESS;
}

}  // namespace xvk::cpu
