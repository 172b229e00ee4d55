#include "oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace xvk_test::oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Element offset into the contiguous mask for element (row r, column j) of x,
// following NumPy broadcasting: align at the last dimension, size-1 mask
// dimensions repeat. Computed from the full multi-index, element by element.
int64_t mask_index(const SoftmaxSpec &spec, int64_t r, int64_t j) {
  const int nd = int(spec.shape.size()), md = int(spec.mask_shape.size());
  std::vector<int64_t> index(size_t(nd), 0);
  index[size_t(nd - 1)] = j;
  for (int k = nd - 2; k >= 0; --k) {
    index[size_t(k)] = r % spec.shape[size_t(k)];
    r /= spec.shape[size_t(k)];
  }
  int64_t offset = 0, stride = 1;
  for (int km = md - 1; km >= 0; --km) {
    const int k = km + (nd - md);
    const int64_t size = spec.mask_shape[size_t(km)];
    if (size != 1) offset += index[size_t(k)] * stride;
    stride *= size;
  }
  return offset;
}

}  // namespace

Expected softmax_forward(const SoftmaxSpec &spec, const std::vector<float> &x, bool log) {
  const int64_t cols = spec.shape.back();
  const int64_t rows = cols == 0 ? 0 : int64_t(x.size()) / cols;
  const int64_t rows_q = spec.shape.size() >= 2 ? spec.shape[spec.shape.size() - 2] : 1;
  Expected e;
  e.ref.assign(x.size(), 0.0);
  e.scale.assign(x.size(), 0.0);
  std::vector<double> z(static_cast<size_t>(cols)), magnitude(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    // Which columns survive the causal mask.
    int64_t last = cols - 1;
    if (spec.causal == XVK_CAUSAL_TOP_LEFT) last = r % rows_q;
    if (spec.causal == XVK_CAUSAL_BOTTOM_RIGHT) last = r % rows_q + (cols - rows_q);
    bool any_nan = false;
    double m = -kInf;
    for (int64_t j = 0; j < cols; ++j) {
      if (j > last) {  // removed by the causal mask: x is not looked at
        z[size_t(j)] = -kInf;
        magnitude[size_t(j)] = 0;
        continue;
      }
      const double sx = double(spec.scale) * double(x[size_t(r * cols + j)]);
      const double mk = spec.mask.empty() ? 0.0 : double(spec.mask[size_t(mask_index(spec, r, j))]);
      z[size_t(j)] = sx + mk;
      magnitude[size_t(j)] = std::fabs(sx) + (std::isfinite(mk) ? std::fabs(mk) : 0.0);
      any_nan = any_nan || std::isnan(z[size_t(j)]);
      m = std::max(m, z[size_t(j)]);
    }
    double *y = e.ref.data() + r * cols;
    double *scale = e.scale.data() + r * cols;
    if (any_nan || m == -kInf) {
      for (int64_t j = 0; j < cols; ++j) y[j] = any_nan ? kNaN : log ? -kInf : 0.0;
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(z[size_t(j)] - m);
    const double log_sum = std::log(sum);
    for (int64_t j = 0; j < cols; ++j) {
      if (log) {
        y[j] = z[size_t(j)] - m - log_sum;
        scale[j] = 1 + magnitude[size_t(j)] + std::fabs(m) + std::fabs(log_sum);
      } else {
        y[j] = std::exp(z[size_t(j)] - m) / sum;
        scale[j] = y[j] * (2 + magnitude[size_t(j)] + std::fabs(m));
      }
    }
  }
  return e;
}

Expected softmax_backward(int64_t rows, int64_t cols, const std::vector<float> &y, const std::vector<float> &dy,
                          float scale, bool log) {
  Expected e;
  e.ref.assign(y.size(), 0.0);
  e.scale.assign(y.size(), 0.0);
  const double s = scale;
  for (int64_t r = 0; r < rows; ++r) {
    const float *yr = y.data() + r * cols, *dyr = dy.data() + r * cols;
    double reduce = 0, reduce_abs = 0;  // softmax: sum(dy * y); log-softmax: sum(dy)
    for (int64_t j = 0; j < cols; ++j) {
      const double term = log ? double(dyr[j]) : double(dyr[j]) * double(yr[j]);
      reduce += term;
      reduce_abs += std::fabs(term);
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double yj = yr[j], dyj = dyr[j];
      double &out = e.ref[size_t(r * cols + j)];
      double &mag = e.scale[size_t(r * cols + j)];
      if (log) {
        const double p = std::exp(yj);
        out = s * (dyj - p * reduce);
        mag = std::fabs(s) * (std::fabs(dyj) + p * reduce_abs * (1 + (std::isfinite(yj) ? std::fabs(yj) : 0.0)));
      } else {
        out = s * yj * (dyj - reduce);
        mag = std::fabs(s) * std::fabs(yj) * (std::fabs(dyj) + reduce_abs);
      }
    }
  }
  return e;
}

NormForward norm_forward(const NormSpec &spec, const std::vector<float> &x, const std::vector<float> *residual,
                         const std::vector<float> *gamma, const std::vector<float> *beta) {
  const int64_t rows = spec.rows, cols = spec.cols;
  if (int64_t(x.size()) != rows * cols) throw std::invalid_argument("oracle::norm_forward: x size");
  const double acc = tolerance(DType::f32).acc;
  NormForward f;
  f.y.ref.assign(x.size(), 0.0);
  f.y.scale.assign(x.size(), 0.0);
  f.h.ref.assign(x.size(), 0.0);
  f.h.scale.assign(x.size(), 0.0);
  f.mean.ref.assign(size_t(rows), 0.0);
  f.mean.scale.assign(size_t(rows), 0.0);
  f.rstd.ref.assign(size_t(rows), 0.0);
  f.rstd.scale.assign(size_t(rows), 0.0);
  std::vector<double> h(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    double max_abs = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = size_t(r * cols + j);
      h[size_t(j)] = residual ? double(round_to(spec.dtype, float(double(x[i]) + double((*residual)[i])))) : x[i];
      f.h.ref[i] = h[size_t(j)];
      max_abs = std::max(max_abs, std::fabs(h[size_t(j)]));
    }
    double mean = 0;
    if (!spec.rms) {
      for (int64_t j = 0; j < cols; ++j) mean += h[size_t(j)];
      mean /= double(cols);
    }
    double var = 0;
    for (int64_t j = 0; j < cols; ++j) var += (h[size_t(j)] - mean) * (h[size_t(j)] - mean);
    var /= double(cols);
    const double rstd = 1.0 / std::sqrt(var + double(spec.epsilon));
    // cond: how much the subtraction of the mean magnifies relative errors.
    const double cond = spec.rms ? 1.0 : max_abs * rstd;
    f.mean.ref[size_t(r)] = mean;
    f.mean.scale[size_t(r)] = max_abs;
    f.rstd.ref[size_t(r)] = rstd;
    // An fp32 mean off by d changes the variance by d^2: relative error of
    // rstd up to (acc * cond)^2 besides the rounding of the sums.
    f.rstd.scale[size_t(r)] = rstd * (1 + acc * cond * cond);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = size_t(r * cols + j);
      const double g = gamma ? double((*gamma)[size_t(j)]) + (spec.zero_centered_gamma ? 1.0 : 0.0) : 1.0;
      const double b = beta ? double((*beta)[size_t(j)]) : 0.0;
      f.y.ref[i] = (h[size_t(j)] - mean) * rstd * g + b;
      // RMSNorm: a product, relative error only. LayerNorm: an fp32 mean is
      // off by up to acc * max|h|, which shifts (h - mean) by that much.
      f.y.scale[i] = spec.rms ? std::fabs(g) * std::fabs(h[size_t(j)]) * rstd
                              : std::fabs(g) * (max_abs + std::fabs(h[size_t(j)] - mean)) * rstd + std::fabs(b);
    }
  }
  return f;
}

NormBackward norm_backward(const NormSpec &spec, const std::vector<float> &dy, const std::vector<float> &x,
                           const std::vector<float> *gamma, const std::vector<float> &mean,
                           const std::vector<float> &rstd) {
  const int64_t rows = spec.rows, cols = spec.cols;
  NormBackward b;
  b.dx.ref.assign(x.size(), 0.0);
  b.dx.scale.assign(x.size(), 0.0);
  b.dgamma.ref.assign(size_t(cols), 0.0);
  b.dgamma.scale.assign(size_t(cols), 0.0);
  b.dbeta.ref.assign(size_t(cols), 0.0);
  b.dbeta.scale.assign(size_t(cols), 0.0);
  std::vector<double> xhat(static_cast<size_t>(cols)), dyg(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double mu = spec.rms ? 0.0 : double(mean[size_t(r)]), rs = rstd[size_t(r)];
    double sum_dyg = 0, sum_dyg_abs = 0, sum_dyg_xhat = 0, sum_dyg_xhat_abs = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = size_t(r * cols + j);
      const double g = gamma ? double((*gamma)[size_t(j)]) + (spec.zero_centered_gamma ? 1.0 : 0.0) : 1.0;
      xhat[size_t(j)] = (double(x[i]) - mu) * rs;
      dyg[size_t(j)] = double(dy[i]) * g;
      sum_dyg += dyg[size_t(j)];
      sum_dyg_abs += std::fabs(dyg[size_t(j)]);
      sum_dyg_xhat += dyg[size_t(j)] * xhat[size_t(j)];
      sum_dyg_xhat_abs += std::fabs(dyg[size_t(j)] * xhat[size_t(j)]);
      b.dgamma.ref[size_t(j)] += double(dy[i]) * xhat[size_t(j)];
      b.dgamma.scale[size_t(j)] += std::fabs(double(dy[i]) * xhat[size_t(j)]);
      b.dbeta.ref[size_t(j)] += double(dy[i]);
      b.dbeta.scale[size_t(j)] += std::fabs(double(dy[i]));
    }
    const double n = double(cols);
    const double c1 = spec.rms ? 0.0 : sum_dyg / n, c2 = sum_dyg_xhat / n;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = size_t(r * cols + j);
      b.dx.ref[i] = rs * (dyg[size_t(j)] - c1 - xhat[size_t(j)] * c2);
      b.dx.scale[i] = rs * (std::fabs(dyg[size_t(j)]) + (spec.rms ? 0.0 : sum_dyg_abs / n) +
                            std::fabs(xhat[size_t(j)]) * sum_dyg_xhat_abs / n);
    }
  }
  return b;
}

// ---------------------------------------------------------------------------
// BatchNorm
// ---------------------------------------------------------------------------

BatchNormForward batch_norm_forward(const BatchNormSpec &spec, bool training, const std::vector<double> &x,
                                    const std::vector<double> *z, const std::vector<double> *gamma,
                                    const std::vector<double> *beta, const std::vector<double> *running_mean,
                                    const std::vector<double> *running_var) {
  const int64_t n = spec.n, c = spec.c, s = spec.s, m = n * s;
  if (int64_t(x.size()) != n * c * s) throw std::invalid_argument("oracle::batch_norm_forward: x size");
  if (training && m < 2) throw std::invalid_argument("oracle::batch_norm_forward: training needs n * s > 1");
  if (!training && (!running_mean || !running_var))
    throw std::invalid_argument("oracle::batch_norm_forward: inference needs the running statistics");
  const double acc = tolerance(DType::f32).acc, eps = double(spec.epsilon), k = double(spec.momentum);
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return size_t((i * c + ch) * s + j); };
  BatchNormForward f;
  for (Expected *e : {&f.y, &f.pre}) {
    e->ref.assign(x.size(), 0.0);
    e->scale.assign(x.size(), 0.0);
  }
  for (Expected *e : {&f.mean, &f.rstd, &f.running_mean, &f.running_var}) {
    e->ref.assign(size_t(c), 0.0);
    e->scale.assign(size_t(c), 0.0);
  }
  f.positive.assign(x.size(), false);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, rstd = 0, max_abs = 0;
    if (training) {
      // Two passes in double: the mean, then the squared deviations from it.
      double sum = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          sum += x[at(i, ch, j)];
          max_abs = std::max(max_abs, std::fabs(x[at(i, ch, j)]));
        }
      mean = sum / double(m);
      double sq = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) sq += (x[at(i, ch, j)] - mean) * (x[at(i, ch, j)] - mean);
      const double var = sq / double(m), var_unbiased = sq / double(m - 1);
      rstd = 1.0 / std::sqrt(var + eps);
      // cond: how much the subtraction of the mean magnifies relative errors.
      // An fp32 mean off by d = acc * max|x| moves the variance by d^2, a
      // relative (acc * cond)^2 (the same reasoning as norm_forward's rstd).
      const double cond = max_abs * rstd;
      f.mean.ref[size_t(ch)] = mean;
      f.mean.scale[size_t(ch)] = max_abs;
      f.rstd.ref[size_t(ch)] = rstd;
      f.rstd.scale[size_t(ch)] = rstd * (1 + acc * cond * cond);
      if (running_mean && running_var) {
        const double rm = (*running_mean)[size_t(ch)], rv = (*running_var)[size_t(ch)];
        f.running_mean.ref[size_t(ch)] = (1 - k) * rm + k * mean;
        f.running_mean.scale[size_t(ch)] = (1 - k) * std::fabs(rm) + k * max_abs;
        f.running_var.ref[size_t(ch)] = (1 - k) * rv + k * var_unbiased;
        f.running_var.scale[size_t(ch)] = (1 - k) * std::fabs(rv) + k * var_unbiased * (1 + acc * cond * cond);
      }
    } else {
      mean = (*running_mean)[size_t(ch)];
      rstd = 1.0 / std::sqrt((*running_var)[size_t(ch)] + eps);
      f.mean.ref[size_t(ch)] = mean;
      f.rstd.ref[size_t(ch)] = rstd;
      f.rstd.scale[size_t(ch)] = rstd;
      f.running_mean.ref[size_t(ch)] = mean;
      f.running_var.ref[size_t(ch)] = (*running_var)[size_t(ch)];
    }
    const double g = gamma ? (*gamma)[size_t(ch)] : 1.0, b = beta ? (*beta)[size_t(ch)] : 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const size_t e = at(i, ch, j);
        const double xm = x[e] - mean, zv = z ? (*z)[e] : 0.0;
        const double v = xm * rstd * g + b + zv;
        f.pre.ref[e] = v;
        // fp32 arithmetic errs by acc relative to the terms: the mean (off by
        // acc * max|x| in training) and x themselves (a backend may fold the
        // statistics into x * a + b', which subtracts x * a and mean * a),
        // then beta and z, which are added.
        const double spread = training ? max_abs + std::fabs(x[e]) : std::fabs(x[e]) + std::fabs(mean);
        f.pre.scale[e] = std::fabs(g) * rstd * (spread + std::fabs(xm)) + std::fabs(b) + std::fabs(zv);
        // ReLU is 1-Lipschitz: y errs no more than v. NaN stays NaN.
        f.y.ref[e] = spec.relu && v <= 0 ? 0.0 : v;
        f.y.scale[e] = f.pre.scale[e];
        f.positive[e] = round_to(spec.dtype, float(f.y.ref[e])) > 0.0f;
      }
  }
  return f;
}

BatchNormBackward batch_norm_backward(const BatchNormSpec &spec, const std::vector<double> &dy,
                                      const std::vector<double> &x, const std::vector<double> *gamma,
                                      const std::vector<double> &saved_mean, const std::vector<double> &saved_rstd,
                                      const std::vector<bool> *positive) {
  const int64_t n = spec.n, c = spec.c, s = spec.s;
  const double m = double(n * s);
  if (int64_t(x.size()) != n * c * s || dy.size() != x.size())
    throw std::invalid_argument("oracle::batch_norm_backward: x or dy size");
  if (spec.relu && (!positive || positive->size() != x.size()))
    throw std::invalid_argument("oracle::batch_norm_backward: ReLU needs one flag per element");
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return size_t((i * c + ch) * s + j); };
  BatchNormBackward b;
  for (Expected *e : {&b.dx, &b.dz}) {
    e->ref.assign(x.size(), 0.0);
    e->scale.assign(x.size(), 0.0);
  }
  for (Expected *e : {&b.dgamma, &b.dbeta}) {
    e->ref.assign(size_t(c), 0.0);
    e->scale.assign(size_t(c), 0.0);
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = saved_mean[size_t(ch)], r = saved_rstd[size_t(ch)];
    const double gam = gamma ? (*gamma)[size_t(ch)] : 1.0;
    // g: the gradient that reaches the normalization (dz = g as well).
    auto grad = [&](size_t e) { return !spec.relu || (*positive)[e] ? dy[e] : 0.0; };
    double sum_g = 0, sum_g_abs = 0, sum_gx = 0, sum_gx_abs = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const size_t e = at(i, ch, j);
        const double g = grad(e), xhat = (x[e] - mu) * r;
        sum_g += g;
        sum_g_abs += std::fabs(g);
        sum_gx += g * xhat;
        sum_gx_abs += std::fabs(g * xhat);
      }
    b.dbeta.ref[size_t(ch)] = sum_g;
    b.dbeta.scale[size_t(ch)] = sum_g_abs;
    b.dgamma.ref[size_t(ch)] = sum_gx;
    b.dgamma.scale[size_t(ch)] = sum_gx_abs;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const size_t e = at(i, ch, j);
        const double g = grad(e), xhat = (x[e] - mu) * r;
        b.dx.ref[e] = gam * r * (g - sum_g / m - xhat * sum_gx / m);
        b.dx.scale[e] = std::fabs(gam) * r * (std::fabs(g) + sum_g_abs / m + std::fabs(xhat) * sum_gx_abs / m);
        b.dz.ref[e] = g;  // a copy (or 0): exact
      }
  }
  return b;
}

}  // namespace xvk_test::oracle
