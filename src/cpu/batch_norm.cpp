// CPU reference of BatchNorm: training and inference forward, backward,
// fused (add +) ReLU and the library's ReLU bitmask. float64 arithmetic,
// two-pass per-channel statistics, reductions in a fixed order.
#include <algorithm>

#include "cpu/cpu_common.hpp"
#include "cpu/cpu_ops.hpp"

namespace xvk::cpu {
namespace {

// Where element (batch i, channel ch, spatial j) lives, and which channel the
// element at memory position e belongs to.
struct Layout {
  int64_t n, c, s;
  bool channels_last;
  int64_t offset(int64_t i, int64_t ch, int64_t j) const {
    return channels_last ? (i * s + j) * c + ch : (i * c + ch) * s + j;
  }
  int64_t channel_of(int64_t e) const { return channels_last ? e % c : (e / s) % c; }
  int64_t numel() const { return n * c * s; }
};

template <class Args>
Layout layout_of(const Args &a) {
  return {a.n, a.c, a.s, a.channels_last != 0};
}

inline bool mask_bit(const uint32_t *mask, int64_t e) { return (mask[e / 32] >> (e % 32)) & 1u; }

constexpr int64_t kWord = 32;

template <class T>
void forward(const xvk_batch_norm_forward_args &a) {
  const Layout l = layout_of(a);
  const int64_t m = l.n * l.s;
  std::vector<double> mean(size_t(l.c)), rstd(size_t(l.c));
  const T *x = static_cast<const T *>(a.x);
  if (a.training) {
    parallel_for(l.c, l.numel(), [&](int64_t ch) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < l.n; ++i)
        for (int64_t j = 0; j < l.s; ++j) sum += to_float(x[l.offset(i, ch, j)]);
      const double mu = sum / double(m);
      for (int64_t i = 0; i < l.n; ++i)
        for (int64_t j = 0; j < l.s; ++j) {
          const double d = double(to_float(x[l.offset(i, ch, j)])) - mu;
          sq += d * d;
        }
      const double var = sq / double(m);
      mean[size_t(ch)] = mu;
      rstd[size_t(ch)] = 1.0 / std::sqrt(var + double(a.epsilon));
      if (a.saved_mean) a.saved_mean[ch] = float(mu);
      if (a.saved_rstd) a.saved_rstd[ch] = float(rstd[size_t(ch)]);
      if (a.running_mean) {
        const double k = a.momentum;
        a.running_mean[ch] = float((1.0 - k) * a.running_mean[ch] + k * mu);
        a.running_var[ch] = float((1.0 - k) * a.running_var[ch] + k * (sq / double(m - 1)));
      }
    });
  } else {
    for (int64_t ch = 0; ch < l.c; ++ch) {
      mean[size_t(ch)] = a.running_mean[ch];
      rstd[size_t(ch)] = 1.0 / std::sqrt(double(a.running_var[ch]) + double(a.epsilon));
    }
  }
  const T *z = static_cast<const T *>(a.z);
  T *y = static_cast<T *>(a.y);
  const int64_t numel = l.numel(), words = (numel + kWord - 1) / kWord;
  // One 32-element word per iteration, so each mask word has one writer.
  parallel_for(words, numel, [&](int64_t w) {
    uint32_t bits = 0;
    for (int64_t e = w * kWord; e < std::min(numel, (w + 1) * kWord); ++e) {
      const int64_t ch = l.channel_of(e);
      const double g = a.gamma ? double(a.gamma[ch]) : 1.0, b = a.beta ? double(a.beta[ch]) : 0.0;
      double v = (double(to_float(x[e])) - mean[size_t(ch)]) * rstd[size_t(ch)] * g + b;
      if (z) v += double(to_float(z[e]));
      if (a.relu && v <= 0) v = 0;  // NaN stays NaN
      const T stored = store<T>(v);
      y[e] = stored;
      if (to_float(stored) > 0) bits |= 1u << (e % kWord);
    }
    if (a.mask) a.mask[w] = bits;
  });
}

template <class T>
void backward(const xvk_batch_norm_backward_args &a) {
  const Layout l = layout_of(a);
  const double m = double(l.n * l.s);
  const T *dy = static_cast<const T *>(a.dy), *x = static_cast<const T *>(a.x), *y = static_cast<const T *>(a.y);
  // The gradient that reaches the normalization: dy where y > 0 under ReLU.
  auto grad = [&](int64_t e) {
    const double d = to_float(dy[e]);
    if (!a.relu) return d;
    const bool positive = a.mask ? mask_bit(a.mask, e) : to_float(y[e]) > 0;
    return positive ? d : 0.0;
  };
  std::vector<double> sum_g(size_t(l.c)), sum_gx(size_t(l.c));
  parallel_for(l.c, l.numel(), [&](int64_t ch) {
    const double mu = a.saved_mean[ch], r = a.saved_rstd[ch];
    double sg = 0, sgx = 0;
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t j = 0; j < l.s; ++j) {
        const int64_t e = l.offset(i, ch, j);
        const double g = grad(e);
        sg += g;
        sgx += g * (double(to_float(x[e])) - mu) * r;
      }
    sum_g[size_t(ch)] = sg;
    sum_gx[size_t(ch)] = sgx;
    if (a.dbeta) a.dbeta[ch] = float(sg);
    if (a.dgamma) a.dgamma[ch] = float(sgx);
  });
  T *dx = static_cast<T *>(a.dx), *dz = static_cast<T *>(a.dz);
  const int64_t numel = l.numel();
  parallel_for(numel, numel, [&](int64_t e) {
    const int64_t ch = l.channel_of(e);
    const double r = a.saved_rstd[ch], gam = a.gamma ? double(a.gamma[ch]) : 1.0;
    const double xhat = (double(to_float(x[e])) - a.saved_mean[ch]) * r;
    const double g = grad(e);
    // Read everything of element e before writing: dx may be dy or x, dz may be dy.
    const double dxe = gam * r * (g - sum_g[size_t(ch)] / m - xhat * sum_gx[size_t(ch)] / m);
    if (dz) dz[e] = store<T>(g);
    dx[e] = store<T>(dxe);
  });
}

}  // namespace

xvk_status_t batch_norm_forward(void *, const xvk_batch_norm_forward_args *args) {
  dispatch(args->dtype, [&](auto tag) { forward<decltype(tag)>(*args); });
  return XVK_SUCCESS;
}

xvk_status_t batch_norm_backward(void *, const xvk_batch_norm_backward_args *args) {
  dispatch(args->dtype, [&](auto tag) { backward<decltype(tag)>(*args); });
  return XVK_SUCCESS;
}

}  // namespace xvk::cpu
