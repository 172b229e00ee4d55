// C entry points of softmax and log-softmax: argument checks, then the backend.
#include <cmath>
#include <cstddef>

#include "core/tensor.hpp"

namespace xvk {
namespace {

static_assert(offsetof(xvk_softmax_options, mask) + sizeof(void *) == sizeof(xvk_softmax_options),
              "options structs must not end in padding: a later field would land in it");
constexpr size_t kSoftmaxOptionsFirstSize = sizeof(xvk_softmax_options);  // version 0.1

xvk_softmax_options read_softmax_options(const xvk_softmax_options *options) {
  const xvk_softmax_options defaults = XVK_SOFTMAX_OPTIONS_INIT;
  const xvk_softmax_options o =
      read_options(options, defaults, kSoftmaxOptionsFirstSize, "xvk_softmax_options");
  if (!std::isfinite(o.scale)) fail(XVK_ERROR_INVALID_ARGUMENT, "options->scale is %g; expected a finite number", o.scale);
  if (o.causal < XVK_CAUSAL_NONE || o.causal > XVK_CAUSAL_BOTTOM_RIGHT)
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->causal is %d; expected an xvk_causal_t value", o.causal);
  return o;
}

// Lays out the broadcast mask: for each leading dimension of x (innermost
// first) the mask's stride, 0 where the mask broadcasts; dimensions of size 1
// are dropped and neighbours that step uniformly are merged.
void describe_mask(const View &x, const View &mask, xvk_softmax_forward_args &args) {
  const DLTensor *xt = x.tensor, *mt = mask.tensor;
  if (mt->ndim < 1 || mt->ndim > xt->ndim)
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->mask has %d dimension(s); expected 1 to %d (x's)", mt->ndim,
         xt->ndim);
  if (mt->shape[mt->ndim - 1] != xt->shape[xt->ndim - 1])
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->mask's last dimension is %lld, expected %lld (x's last dimension)",
         (long long)mt->shape[mt->ndim - 1], (long long)xt->shape[xt->ndim - 1]);
  const int shift = xt->ndim - mt->ndim;  // x dimension k is mask dimension k - shift
  int64_t contiguous_stride = mt->shape[mt->ndim - 1];
  int n = 0;
  for (int k = xt->ndim - 2; k >= 0; --k) {
    const int km = k - shift;
    int64_t stride = 0;
    if (km >= 0) {
      const int64_t size = mt->shape[km];
      if (size != 1 && size != xt->shape[k])
        fail(XVK_ERROR_INVALID_ARGUMENT,
             "options->mask has size %lld in dimension %d, which does not broadcast to x's %lld", (long long)size,
             km, (long long)xt->shape[k]);
      const int64_t own_stride = mt->strides ? mt->strides[km] : contiguous_stride;
      if (own_stride < 0) fail(XVK_ERROR_UNSUPPORTED, "options->mask has a negative stride in dimension %d", km);
      stride = size == 1 ? 0 : own_stride;
      contiguous_stride *= size;
    }
    if (xt->shape[k] == 1) continue;
    if (n > 0 && stride == args.mask_stride[n - 1] * args.mask_shape[n - 1]) {
      args.mask_shape[n - 1] *= xt->shape[k];  // steps uniformly with the inner one: merge
      continue;
    }
    if (n == XVK_MAX_MASK_DIMS)
      fail(XVK_ERROR_UNSUPPORTED, "options->mask broadcasts over more than %d separate dimensions of x",
           XVK_MAX_MASK_DIMS);
    args.mask_shape[n] = xt->shape[k];
    args.mask_stride[n] = stride;
    ++n;
  }
  args.mask = mask.base;
  args.mask_ndim = n;
}

xvk_status_t softmax_forward(const char *function, bool log, xvk_context *ctx, const DLTensor *x,
                             const xvk_softmax_options *options, DLTensor *y) {
  return guarded(function, [&] {
    const xvk_context &c = live_context(ctx);
    const xvk_softmax_options o = read_softmax_options(options);
    const View xv = check_rows(c, "x", x, kAnyFloat, 1, false);
    const View yv = check_rows(c, "y", y, kAnyFloat, 1, true);
    check_same_shape(yv, xv);
    check_same_dtype(yv, xv);
    xvk_softmax_forward_args args{};
    args.rows = xv.rows;
    args.cols = xv.cols;
    args.dtype = xv.dtype;
    args.log = log;
    args.scale = o.scale;
    args.causal = o.causal;
    if (o.causal != XVK_CAUSAL_NONE) {
      if (x->ndim < 2)
        fail(XVK_ERROR_INVALID_ARGUMENT, "options->causal needs x with at least 2 dimensions (queries, keys)");
      args.causal_rows = x->shape[x->ndim - 2];
    }
    View mv;
    if (o.mask) {
      mv = check_rows(c, "options->mask", o.mask, kAnyFloat, 1, false);
      check_same_dtype(mv, xv);
      describe_mask(xv, mv, args);
    }
    check_no_overlap({&yv}, {&xv, &mv}, {{&yv, &xv}});
    args.x = xv.rows_view();
    args.y = yv.rows_view();
    if (args.rows == 0 || args.cols == 0) return XVK_SUCCESS;
    return call_backend(c.ops->softmax_forward, c.impl, &args);
  });
}

xvk_status_t softmax_backward(const char *function, bool log, xvk_context *ctx, const DLTensor *y,
                              const DLTensor *dy, const xvk_softmax_options *options, DLTensor *dx) {
  return guarded(function, [&] {
    const xvk_context &c = live_context(ctx);
    const xvk_softmax_options o = read_softmax_options(options);
    if (o.mask)
      fail(XVK_ERROR_INVALID_ARGUMENT, "options->mask must be NULL for the backward (its effect is already in y)");
    if (o.causal != XVK_CAUSAL_NONE)
      fail(XVK_ERROR_INVALID_ARGUMENT,
           "options->causal must be XVK_CAUSAL_NONE for the backward (its effect is already in y)");
    const View yv = check_rows(c, "y", y, kAnyFloat, 1, false);
    const View dyv = check_rows(c, "dy", dy, kAnyFloat, 1, false);
    const View dxv = check_rows(c, "dx", dx, kAnyFloat, 1, true);
    check_same_shape(dyv, yv);
    check_same_dtype(dyv, yv);
    check_same_shape(dxv, yv);
    check_same_dtype(dxv, yv);
    check_no_overlap({&dxv}, {&yv, &dyv}, {{&dxv, &dyv}, {&dxv, &yv}});
    xvk_softmax_backward_args args{};
    args.rows = yv.rows;
    args.cols = yv.cols;
    args.dtype = yv.dtype;
    args.log = log;
    args.scale = o.scale;
    args.y = yv.rows_view();
    args.dy = dyv.rows_view();
    args.dx = dxv.rows_view();
    if (args.rows == 0 || args.cols == 0) return XVK_SUCCESS;
    return call_backend(c.ops->softmax_backward, c.impl, &args);
  });
}

}  // namespace
}  // namespace xvk

extern "C" {

XVK_API xvk_status_t xvk_softmax_forward(xvk_context *ctx, const DLTensor *x,
                                         const xvk_softmax_options *options, DLTensor *y) {
  return xvk::softmax_forward("xvk_softmax_forward", false, ctx, x, options, y);
}

XVK_API xvk_status_t xvk_log_softmax_forward(xvk_context *ctx, const DLTensor *x,
                                             const xvk_softmax_options *options, DLTensor *y) {
  return xvk::softmax_forward("xvk_log_softmax_forward", true, ctx, x, options, y);
}

XVK_API xvk_status_t xvk_softmax_backward(xvk_context *ctx, const DLTensor *y, const DLTensor *dy,
                                          const xvk_softmax_options *options, DLTensor *dx) {
  return xvk::softmax_backward("xvk_softmax_backward", false, ctx, y, dy, options, dx);
}

XVK_API xvk_status_t xvk_log_softmax_backward(xvk_context *ctx, const DLTensor *y,
                                              const DLTensor *dy,
                                              const xvk_softmax_options *options, DLTensor *dx) {
  return xvk::softmax_backward("xvk_log_softmax_backward", true, ctx, y, dy, options, dx);
}

}  // extern "C"
