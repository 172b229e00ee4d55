// CPU reference of layer_norm and rms_norm, forward and backward: float64
// arithmetic, two-pass variance, per-column reductions in a fixed order.
#include <algorithm>

#include "cpu/cpu_common.hpp"
#include "cpu/cpu_ops.hpp"

namespace xvk::cpu {
namespace {

template <class T>
void forward(const xvk_norm_forward_args &a) {
  const int64_t cols = a.cols;
  const double add = a.zero_centered_gamma ? 1.0 : 0.0;
  const std::vector<double> gamma = load_params(a.gamma, a.param_dtype, cols, 1.0, a.gamma ? add : 0.0);
  const std::vector<double> beta = load_params(a.beta, a.param_dtype, cols, 0.0, 0.0);
  std::vector<double> scratch(size_t(max_threads()) * size_t(cols));
  parallel_for(a.rows, a.rows * cols, [&](int64_t r) {
    double *h = scratch.data() + size_t(thread_id()) * size_t(cols);
    const T *x = row_of<T>(a.x, r);
    const T *res = a.residual.data ? row_of<T>(a.residual, r) : nullptr;
    T *res_out = a.residual_out.data ? mutable_row_of<T>(a.residual_out, r) : nullptr;
    for (int64_t j = 0; j < cols; ++j) {
      // The sum is rounded to T: it is what residual_out holds, so y == norm(residual_out).
      const T hj = res ? store<T>(double(to_float(x[j])) + to_float(res[j])) : x[j];
      if (res_out) res_out[j] = hj;
      h[j] = to_float(hj);
    }
    double mean = 0, var = 0;
    if (!a.rms) {
      for (int64_t j = 0; j < cols; ++j) mean += h[j];
      mean /= double(cols);
    }
    for (int64_t j = 0; j < cols; ++j) var += (h[j] - mean) * (h[j] - mean);
    var /= double(cols);
    const double rstd = 1.0 / std::sqrt(var + double(a.epsilon));
    T *y = mutable_row_of<T>(a.y, r);
    for (int64_t j = 0; j < cols; ++j) y[j] = store<T>((h[j] - mean) * rstd * gamma[j] + beta[j]);
    if (a.mean) a.mean[r] = float(mean);
    if (a.rstd) a.rstd[r] = float(rstd);
  });
}

template <class T>
void backward(const xvk_norm_backward_args &a) {
  const int64_t cols = a.cols;
  const double add = a.zero_centered_gamma ? 1.0 : 0.0;
  const std::vector<double> gamma = load_params(a.gamma, a.param_dtype, cols, 1.0, a.gamma ? add : 0.0);
  const bool want_params = a.dgamma || a.dbeta;
  // dgamma/dbeta: each chunk of rows sums into its own partials, and the
  // partials are added in chunk order, so the result is the same for any
  // number of threads.
  const int64_t chunks = want_params ? std::min<int64_t>(a.rows, 64) : 0;
  std::vector<double> dgamma_part(size_t(chunks) * size_t(cols), 0.0), dbeta_part(dgamma_part.size(), 0.0);
  std::vector<double> scratch(size_t(max_threads()) * 2 * size_t(cols));
  const int64_t nchunks = want_params ? chunks : std::min<int64_t>(a.rows, 4 * int64_t(max_threads()));
  parallel_for(nchunks, a.rows * cols, [&](int64_t chunk) {
    double *xhat = scratch.data() + size_t(thread_id()) * 2 * size_t(cols);
    double *dyg = xhat + cols;
    const int64_t begin = a.rows * chunk / nchunks, end = a.rows * (chunk + 1) / nchunks;
    for (int64_t r = begin; r < end; ++r) {
      const T *x = row_of<T>(a.x, r);
      const T *dy = row_of<T>(a.dy, r);
      const double mean = a.mean ? a.mean[r] : 0.0, rstd = a.rstd[r];
      double sum_dyg = 0, sum_dyg_xhat = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double dyj = to_float(dy[j]);
        xhat[j] = (double(to_float(x[j])) - mean) * rstd;
        dyg[j] = dyj * gamma[j];
        sum_dyg += dyg[j];
        sum_dyg_xhat += dyg[j] * xhat[j];
        if (want_params) {
          dgamma_part[size_t(chunk) * cols + j] += dyj * xhat[j];
          dbeta_part[size_t(chunk) * cols + j] += dyj;
        }
      }
      const double c1 = a.rms ? 0.0 : sum_dyg / double(cols), c2 = sum_dyg_xhat / double(cols);
      T *dx = mutable_row_of<T>(a.dx, r);  // may be x or dy: the row was read in full above
      for (int64_t j = 0; j < cols; ++j) dx[j] = store<T>(rstd * (dyg[j] - c1 - xhat[j] * c2));
    }
  });
  if (!want_params) return;
  std::vector<double> dgamma(size_t(cols), 0.0), dbeta(size_t(cols), 0.0);
  for (int64_t chunk = 0; chunk < chunks; ++chunk)
    for (int64_t j = 0; j < cols; ++j) {
      dgamma[j] += dgamma_part[size_t(chunk) * cols + j];
      dbeta[j] += dbeta_part[size_t(chunk) * cols + j];
    }
  store_params(a.dgamma, a.dparam_dtype, dgamma);
  store_params(a.dbeta, a.dparam_dtype, dbeta);
}

}  // namespace

// layer_norm and rms_norm share these entry points; args->rms tells them apart.
xvk_status_t norm_forward(void *, const xvk_norm_forward_args *args) {
  dispatch(args->dtype, [&](auto tag) { forward<decltype(tag)>(*args); });
  return XVK_SUCCESS;
}

xvk_status_t norm_backward(void *, const xvk_norm_backward_args *args) {
  dispatch(args->dtype, [&](auto tag) { backward<decltype(tag)>(*args); });
  return XVK_SUCCESS;
}

}  // namespace xvk::cpu
