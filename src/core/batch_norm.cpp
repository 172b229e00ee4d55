// C entry points of BatchNorm (training and inference forward, backward) and
// the ReLU-mask size query: argument checks, the memory-order analysis that
// turns a DLTensor into (n, c, s, channels_last), then the backend.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace xvk {
namespace {

static_assert(offsetof(xvk_batch_norm_options, channel_axis) + sizeof(int32_t) == sizeof(xvk_batch_norm_options),
              "options structs must not end in padding: a later field would land in it");
constexpr size_t kBatchNormOptionsFirstSize = sizeof(xvk_batch_norm_options);  // version 0.1

struct BatchNormOptions {
  float epsilon, momentum;
  bool relu;
  int32_t channel_axis;  // as given; resolved against x's ndim by layout_of
};

BatchNormOptions read_batch_norm_options(const xvk_batch_norm_options *options) {
  const xvk_batch_norm_options defaults = XVK_BATCH_NORM_OPTIONS_INIT;
  const xvk_batch_norm_options o =
      read_options(options, defaults, kBatchNormOptionsFirstSize, "xvk_batch_norm_options");
  if (!(o.epsilon > 0.0f) || !std::isfinite(o.epsilon))
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->epsilon is %g; expected a finite number > 0", o.epsilon);
  if (!(o.momentum >= 0.0f && o.momentum <= 1.0f))
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->momentum is %g; expected a number in [0, 1]", o.momentum);
  if (o.activation != XVK_ACTIVATION_NONE && o.activation != XVK_ACTIVATION_RELU)
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->activation is %d; expected XVK_ACTIVATION_NONE or XVK_ACTIVATION_RELU",
         o.activation);
  return {o.epsilon, o.momentum, o.activation == XVK_ACTIVATION_RELU, o.channel_axis};
}

// x as BatchNorm sees it: n x c x s in one of the two dense memory orders.
struct Layout {
  int64_t n = 0, c = 0, s = 1;
  int axis = 1;
  bool channels_last = false;
};

// Whether t's strides make it dense in the memory order `order` (outermost
// first). NULL strides are row-major over the logical shape. Size-1
// dimensions carry no stride.
bool dense_in_order(const DLTensor *t, const std::vector<int> &order) {
  // An empty tensor addresses nothing: any strides will do (PyTorch gives
  // size-0 dimensions the strides of size 1).
  for (int k = 0; k < t->ndim; ++k)
    if (t->shape[k] == 0) return true;
  int64_t expected = 1;
  for (auto k = order.rbegin(); k != order.rend(); ++k) {
    const int64_t stride = t->strides ? t->strides[*k] : 0;
    if (t->strides && t->shape[*k] != 1 && stride != expected) return false;
    expected *= t->shape[*k];
  }
  if (t->strides) return true;
  // Row-major: dense in `order` only if order lists the non-unit dims in increasing position.
  int last = -1;
  for (int k : order) {
    if (t->shape[k] == 1) continue;
    if (k < last) return false;
    last = k;
  }
  return true;
}

// The two memory orders BatchNorm reads: (N, C, spatial) and (N, spatial, C).
void orders_of(int ndim, int axis, std::vector<int> &first, std::vector<int> &last) {
  first = {0, axis};
  last = {0};
  for (int k = 1; k < ndim; ++k)
    if (k != axis) {
      first.push_back(k);
      last.push_back(k);
    }
  last.push_back(axis);
}

Layout layout_of(const View &xv, int32_t channel_axis) {
  const DLTensor *t = xv.tensor;
  if (t->ndim < 2)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %d dimension(s); BatchNorm needs at least 2 (N, C, ...)", xv.name,
         t->ndim);
  Layout l;
  if (channel_axis == 1 || channel_axis == -1 || channel_axis == t->ndim - 1)
    l.axis = channel_axis == -1 ? t->ndim - 1 : channel_axis;
  else
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->channel_axis is %d; expected 1, -1 or %d (%s has %d dimensions)",
         channel_axis, t->ndim - 1, xv.name, t->ndim);
  l.n = t->shape[0];
  l.c = t->shape[l.axis];
  for (int k = 1; k < t->ndim; ++k)
    if (k != l.axis) l.s *= t->shape[k];
  std::vector<int> first, last;
  orders_of(t->ndim, l.axis, first, last);
  const bool is_first = dense_in_order(t, first), is_last = dense_in_order(t, last);
  if (!is_first && !is_last)
    fail(XVK_ERROR_UNSUPPORTED,
         "%s's strides are neither dense channels-first (N, C, spatial) nor dense channels-last (N, spatial, C)",
         xv.name);
  // Where both orders describe the same memory (s == 1 or c == 1) the choice only picks a kernel.
  l.channels_last = is_last && (!is_first || l.s == 1);
  return l;
}

// An activation-shaped tensor: as x in shape, dtype and memory order.
View check_activation(const xvk_context &c, const char *name, const DLTensor *t, const View &x, const Layout &l) {
  View v = check_common(c, name, t, kAnyFloat);
  check_same_shape(v, x);
  check_same_dtype(v, x);
  std::vector<int> first, last;
  orders_of(t->ndim, l.axis, first, last);
  if (!dense_in_order(t, l.channels_last ? last : first))
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s's strides do not give %s's memory order (%s)", name, x.name,
         l.channels_last ? "dense channels-last: N, spatial, C" : "dense channels-first: N, C, spatial");
  v.rows = 1;
  v.cols = numel_of(t);
  v.row_stride = v.cols;
  return v;
}

View check_x(const xvk_context &c, const char *name, const DLTensor *t, int32_t channel_axis, Layout &l) {
  View v = check_common(c, name, t, kAnyFloat);
  l = layout_of(v, channel_axis);
  v.rows = 1;
  v.cols = numel_of(t);
  v.row_stride = v.cols;
  return v;
}

// A contiguous tensor of any shape (size-1 dimensions carry no stride), as one row.
View check_contiguous(const xvk_context &c, const char *name, const DLTensor *t, unsigned allowed) {
  View v = check_common(c, name, t, allowed);
  if (t->strides) {
    int64_t expected = 1;
    for (int k = t->ndim - 1; k >= 0; --k) {
      if (t->shape[k] != 1 && t->strides[k] != expected)
        fail(XVK_ERROR_UNSUPPORTED, "%s has stride %lld in dimension %d, expected %lld: it must be contiguous", name,
             (long long)t->strides[k], k, (long long)expected);
      expected *= t->shape[k];
    }
  }
  v.rows = 1;
  v.cols = numel_of(t);
  v.row_stride = v.cols;
  return v;
}

// A per-channel float32 vector: contiguous, c elements, any shape.
View check_channel_vector(const xvk_context &c, const char *name, const DLTensor *t, const Layout &l) {
  if (!t) return View{};
  const View v = check_contiguous(c, name, t, kFloat32Only);
  if (v.cols != l.c)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %lld elements, expected %lld (the number of channels)", name,
         (long long)v.cols, (long long)l.c);
  return v;
}

int64_t mask_words_of(int64_t numel) { return numel / 32 + (numel % 32 != 0); }

View check_mask(const xvk_context &c, const char *name, const DLTensor *t, const View &x, bool relu, bool output) {
  if (!t) return View{};
  if (!relu)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s is given but options->activation is not XVK_ACTIVATION_RELU", name);
  (void)output;
  const View v = check_contiguous(c, name, t, kMaskWords);
  const int64_t words = mask_words_of(x.cols), numel = v.cols;
  if (numel != words)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %lld elements, expected %lld (xvk_batch_norm_mask_words of %s)", name,
         (long long)numel, (long long)words, x.name);
  return v;
}

void check_values_per_channel(const View &x, const Layout &l, const char *what) {
  if (l.c > 0 && l.n * l.s < 2)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %lld value(s) per channel; %s needs more than 1", x.name,
         (long long)(l.n * l.s), what);
}

template <class Args>
void fill_layout(Args &a, const Layout &l, const View &x) {
  a.n = l.n;
  a.c = l.c;
  a.s = l.s;
  a.channels_last = l.channels_last;
  a.dtype = x.dtype;
}

xvk_status_t forward(bool training, xvk_context *ctx, const DLTensor *x, const DLTensor *z, const DLTensor *gamma,
                     const DLTensor *beta, const BatchNormOptions &o, DLTensor *y, DLTensor *mask,
                     DLTensor *running_mean, DLTensor *running_var, DLTensor *saved_mean, DLTensor *saved_rstd) {
  const xvk_context &c = live_context(ctx);
  Layout l;
  const View xv = check_x(c, "x", x, o.channel_axis, l);
  if (training) check_values_per_channel(xv, l, "training");
  const View zv = z ? check_activation(c, "z", z, xv, l) : View{};
  const View yv = check_activation(c, "y", y, xv, l);
  const View gv = check_channel_vector(c, "gamma", gamma, l);
  const View bv = check_channel_vector(c, "beta", beta, l);
  if (!training && (!running_mean || !running_var))
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s is NULL; inference needs the running statistics",
         running_mean ? "running_var" : "running_mean");
  if (training && !running_mean != !running_var)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s is given but %s is NULL; pass both or neither",
         running_mean ? "running_mean" : "running_var", running_mean ? "running_var" : "running_mean");
  const View rmv = check_channel_vector(c, "running_mean", running_mean, l);
  const View rvv = check_channel_vector(c, "running_var", running_var, l);
  const View smv = check_channel_vector(c, "saved_mean", saved_mean, l);
  const View srv = check_channel_vector(c, "saved_rstd", saved_rstd, l);
  const View mv = check_mask(c, "mask", mask, xv, o.relu, true);
  if (training)
    check_no_overlap({&yv, &mv, &rmv, &rvv, &smv, &srv}, {&xv, &zv, &gv, &bv}, {{&yv, &xv}, {&yv, &zv}});
  else
    check_no_overlap({&yv, &mv}, {&xv, &zv, &gv, &bv, &rmv, &rvv}, {{&yv, &xv}, {&yv, &zv}});
  if (l.c == 0 || (!training && xv.cols == 0)) return XVK_SUCCESS;
  xvk_batch_norm_forward_args a{};
  fill_layout(a, l, xv);
  a.training = training;
  a.relu = o.relu;
  a.epsilon = o.epsilon;
  a.momentum = o.momentum;
  a.x = xv.base;
  a.z = zv.base;
  a.y = yv.base;
  a.mask = reinterpret_cast<uint32_t *>(mv.base);
  a.gamma = reinterpret_cast<const float *>(gv.base);
  a.beta = reinterpret_cast<const float *>(bv.base);
  a.running_mean = reinterpret_cast<float *>(rmv.base);
  a.running_var = reinterpret_cast<float *>(rvv.base);
  a.saved_mean = reinterpret_cast<float *>(smv.base);
  a.saved_rstd = reinterpret_cast<float *>(srv.base);
  return call_backend(c.ops->batch_norm_forward, c.impl, &a);
}

xvk_status_t backward(xvk_context *ctx, const DLTensor *dy, const DLTensor *x, const DLTensor *mask,
                      const DLTensor *y, const DLTensor *gamma, const DLTensor *saved_mean,
                      const DLTensor *saved_rstd, const BatchNormOptions &o, DLTensor *dx, DLTensor *dz,
                      DLTensor *dgamma, DLTensor *dbeta) {
  const xvk_context &c = live_context(ctx);
  Layout l;
  const View dyv = check_x(c, "dy", dy, o.channel_axis, l);
  check_values_per_channel(dyv, l, "the backward of training");
  const View xv = check_activation(c, "x", x, dyv, l);
  if (o.relu && !mask == !y)
    fail(XVK_ERROR_INVALID_ARGUMENT, mask ? "mask and y are both given; pass exactly one (mask is the cheaper)"
                                          : "mask and y are both NULL; XVK_ACTIVATION_RELU needs one of them");
  if (!o.relu && y)
    fail(XVK_ERROR_INVALID_ARGUMENT, "y is given but options->activation is not XVK_ACTIVATION_RELU");
  const View mv = check_mask(c, "mask", mask, dyv, o.relu, false);
  const View yv = y ? check_activation(c, "y", y, dyv, l) : View{};
  const View gv = check_channel_vector(c, "gamma", gamma, l);
  if (!saved_mean || !saved_rstd)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s is NULL; the backward needs the forward's saved statistics",
         saved_mean ? "saved_rstd" : "saved_mean");
  const View smv = check_channel_vector(c, "saved_mean", saved_mean, l);
  const View srv = check_channel_vector(c, "saved_rstd", saved_rstd, l);
  const View dxv = check_activation(c, "dx", dx, dyv, l);
  const View dzv = dz ? check_activation(c, "dz", dz, dyv, l) : View{};
  const View dgv = check_channel_vector(c, "dgamma", dgamma, l);
  const View dbv = check_channel_vector(c, "dbeta", dbeta, l);
  check_no_overlap({&dxv, &dzv, &dgv, &dbv}, {&dyv, &xv, &mv, &yv, &gv, &smv, &srv},
                   {{&dxv, &dyv}, {&dxv, &xv}, {&dzv, &dyv}});
  if (l.c == 0) return XVK_SUCCESS;
  xvk_batch_norm_backward_args a{};
  fill_layout(a, l, dyv);
  a.relu = o.relu;
  a.dy = dyv.base;
  a.x = xv.base;
  a.y = yv.base;
  a.mask = reinterpret_cast<const uint32_t *>(mv.base);
  a.gamma = reinterpret_cast<const float *>(gv.base);
  a.saved_mean = reinterpret_cast<const float *>(smv.base);
  a.saved_rstd = reinterpret_cast<const float *>(srv.base);
  a.dx = dxv.base;
  a.dz = dzv.base;
  a.dgamma = reinterpret_cast<float *>(dgv.base);
  a.dbeta = reinterpret_cast<float *>(dbv.base);
  return call_backend(c.ops->batch_norm_backward, c.impl, &a);
}

}  // namespace
}  // namespace xvk

extern "C" {

XVK_API xvk_status_t xvk_batch_norm_mask_words(const DLTensor *x, int64_t *words) {
  return xvk::guarded("xvk_batch_norm_mask_words", [&] {
    if (!x) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "x is NULL");
    if (!words) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "words is NULL");
    if (x->ndim < 0 || x->ndim > 64)
      xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "x has ndim %d; expected 0 to 64", x->ndim);
    if (x->ndim > 0 && !x->shape) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "x->shape is NULL");
    int64_t numel = 1;
    for (int k = 0; k < x->ndim; ++k) {
      if (x->shape[k] < 0)
        xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "x has a negative size %lld in dimension %d",
                  (long long)x->shape[k], k);
      if (x->shape[k] != 0 && numel > INT64_MAX / x->shape[k])
        xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "x has more elements than fit in 64 bits");
      numel *= x->shape[k];
    }
    *words = xvk::mask_words_of(numel);
    return XVK_SUCCESS;
  });
}

XVK_API xvk_status_t xvk_batch_norm_forward_training(xvk_context *ctx, const DLTensor *x, const DLTensor *z,
                                                     const DLTensor *gamma, const DLTensor *beta,
                                                     const xvk_batch_norm_options *options, DLTensor *y,
                                                     DLTensor *mask, DLTensor *running_mean,
                                                     DLTensor *running_var, DLTensor *saved_mean,
                                                     DLTensor *saved_rstd) {
  return xvk::guarded("xvk_batch_norm_forward_training", [&] {
    return xvk::forward(true, ctx, x, z, gamma, beta, xvk::read_batch_norm_options(options), y, mask, running_mean,
                        running_var, saved_mean, saved_rstd);
  });
}

XVK_API xvk_status_t xvk_batch_norm_forward_inference(xvk_context *ctx, const DLTensor *x, const DLTensor *z,
                                                      const DLTensor *gamma, const DLTensor *beta,
                                                      const DLTensor *running_mean, const DLTensor *running_var,
                                                      const xvk_batch_norm_options *options, DLTensor *y,
                                                      DLTensor *mask) {
  return xvk::guarded("xvk_batch_norm_forward_inference", [&] {
    // The running statistics are inputs here; forward() takes them through its in/out slots unwritten.
    return xvk::forward(false, ctx, x, z, gamma, beta, xvk::read_batch_norm_options(options), y, mask,
                        const_cast<DLTensor *>(running_mean), const_cast<DLTensor *>(running_var), nullptr,
                        nullptr);
  });
}

XVK_API xvk_status_t xvk_batch_norm_backward(xvk_context *ctx, const DLTensor *dy, const DLTensor *x,
                                             const DLTensor *mask, const DLTensor *y, const DLTensor *gamma,
                                             const DLTensor *saved_mean, const DLTensor *saved_rstd,
                                             const xvk_batch_norm_options *options, DLTensor *dx, DLTensor *dz,
                                             DLTensor *dgamma, DLTensor *dbeta) {
  return xvk::guarded("xvk_batch_norm_backward", [&] {
    return xvk::backward(ctx, dy, x, mask, y, gamma, saved_mean, saved_rstd, xvk::read_batch_norm_options(options),
                         dx, dz, dgamma, dbeta);
  });
}

}  // extern "C"
