// C entry points of LayerNorm and RMSNorm (forward and backward): argument
// checks, then the backend. The two share everything but beta and the mean,
// so one implementation serves both.
#include <cmath>
#include <cstddef>

#include "core/tensor.hpp"

namespace xvk {
namespace {

static_assert(sizeof(xvk_layer_norm_options) == sizeof(xvk_rms_norm_options) &&
                  offsetof(xvk_layer_norm_options, residual_out) == offsetof(xvk_rms_norm_options, residual_out),
              "the norm options share one layout");
static_assert(offsetof(xvk_layer_norm_options, residual_out) + sizeof(void *) == sizeof(xvk_layer_norm_options),
              "options structs must not end in padding: a later field would land in it");
constexpr size_t kNormOptionsFirstSize = sizeof(xvk_layer_norm_options);  // version 0.1

struct NormOptions {
  float epsilon;
  int normalized_ndim;
  bool zero_centered_gamma;
  const DLTensor *residual;
  DLTensor *residual_out;
};

template <class Options>
NormOptions read_norm_options(const Options *options, const Options &defaults, const char *type) {
  const Options o = read_options(options, defaults, kNormOptionsFirstSize, type);
  if (!(o.epsilon > 0.0f) || !std::isfinite(o.epsilon))
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->epsilon is %g; expected a finite number > 0", o.epsilon);
  if (o.normalized_ndim < 0)
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->normalized_ndim is %d; expected >= 0 (0 means 1)", o.normalized_ndim);
  return {o.epsilon, o.normalized_ndim == 0 ? 1 : o.normalized_ndim, o.zero_centered_gamma != 0, o.residual,
          o.residual_out};
}

NormOptions read_options_of(const xvk_layer_norm_options *options) {
  const xvk_layer_norm_options defaults = XVK_LAYER_NORM_OPTIONS_INIT;
  return read_norm_options(options, defaults, "xvk_layer_norm_options");
}
NormOptions read_options_of(const xvk_rms_norm_options *options) {
  const xvk_rms_norm_options defaults = XVK_RMS_NORM_OPTIONS_INIT;
  return read_norm_options(options, defaults, "xvk_rms_norm_options");
}

// gamma/beta (or dgamma/dbeta): optional per-column vectors of x's dtype or float32, one dtype for the pair.
void check_params(const xvk_context &c, const View &x, int nd, const char *gname, const DLTensor *g,
                  const char *bname, const DLTensor *b, View &gv, View &bv) {
  if (g) {
    gv = check_vector(c, gname, g, kAnyFloat, x.cols, "the normalized size", x.tensor, nd);
    check_param_dtype(gv, x);
  }
  if (b) {
    bv = check_vector(c, bname, b, kAnyFloat, x.cols, "the normalized size", x.tensor, nd);
    check_param_dtype(bv, x);
  }
  if (gv && bv && gv.dtype != bv.dtype)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has dtype %s but %s has %s; they must share a dtype", bname,
         dtype_name(bv.dtype), gname, dtype_name(gv.dtype));
}

View check_x(const xvk_context &c, const char *name, const DLTensor *x, int nd) {
  // Said here rather than by check_rows, whose message would not name the option at fault.
  if (x && x->ndim >= 0 && nd > x->ndim)
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->normalized_ndim is %d but %s has %d dimension(s)", nd, name,
         x->ndim);
  const View xv = check_rows(c, name, x, kAnyFloat, nd, false);
  if (xv.cols == 0)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s's normalized size (the product of its last %d dimension(s)) is 0", name, nd);
  return xv;
}

View check_like(const xvk_context &c, const char *name, const DLTensor *t, const View &x, int nd, bool output) {
  const View v = check_rows(c, name, t, kAnyFloat, nd, output);
  check_same_shape(v, x);
  check_same_dtype(v, x);
  return v;
}

xvk_status_t norm_forward(bool rms, xvk_context *ctx, const DLTensor *x,
                          const DLTensor *gamma, const DLTensor *beta, const NormOptions &o, DLTensor *y,
                          DLTensor *mean, DLTensor *rstd) {
  const xvk_context &c = live_context(ctx);
  const int nd = o.normalized_ndim;
  const View xv = check_x(c, "x", x, nd);
  const View yv = check_like(c, "y", y, xv, nd, true);
  View gv, bv;
  check_params(c, xv, nd, "gamma", gamma, "beta", beta, gv, bv);
  if (o.residual_out && !o.residual)
    fail(XVK_ERROR_INVALID_ARGUMENT, "options->residual_out is set but options->residual is NULL");
  const View rv = o.residual ? check_like(c, "options->residual", o.residual, xv, nd, false) : View{};
  const View rov = o.residual_out ? check_like(c, "options->residual_out", o.residual_out, xv, nd, true) : View{};
  const View mv = mean ? check_row_stats(c, "mean", mean, xv.rows) : View{};
  const View sv = rstd ? check_row_stats(c, "rstd", rstd, xv.rows) : View{};
  check_no_overlap({&yv, &rov, &mv, &sv}, {&xv, &rv, &gv, &bv}, {{&yv, &xv}, {&yv, &rv}});
  if (xv.rows == 0) return XVK_SUCCESS;
  xvk_norm_forward_args args{};
  args.rows = xv.rows;
  args.cols = xv.cols;
  args.dtype = xv.dtype;
  args.rms = rms;
  args.epsilon = o.epsilon;
  args.zero_centered_gamma = o.zero_centered_gamma;
  args.x = xv.rows_view();
  args.residual = rv.rows_view();
  args.residual_out = rov.rows_view();
  args.y = yv.rows_view();
  args.gamma = gv.base;
  args.beta = bv.base;
  args.param_dtype = gv ? gv.dtype : bv ? bv.dtype : xv.dtype;
  args.mean = reinterpret_cast<float *>(mv.base);
  args.rstd = reinterpret_cast<float *>(sv.base);
  return call_backend(c.ops->norm_forward, c.impl, &args);
}

xvk_status_t norm_backward(bool rms, xvk_context *ctx, const DLTensor *dy,
                           const DLTensor *x, const DLTensor *gamma, const DLTensor *mean,
                           const DLTensor *rstd, const NormOptions &o, DLTensor *dx, DLTensor *dgamma,
                           DLTensor *dbeta) {
  const xvk_context &c = live_context(ctx);
  if (o.residual || o.residual_out)
    fail(XVK_ERROR_INVALID_ARGUMENT,
         "options->residual and options->residual_out must be NULL for the backward (pass x + residual as x)");
  const int nd = o.normalized_ndim;
  const View dyv = check_x(c, "dy", dy, nd);
  const View xv = check_like(c, "x", x, dyv, nd, false);
  const View dxv = check_like(c, "dx", dx, dyv, nd, true);
  View gv, unused;
  check_params(c, xv, nd, "gamma", gamma, "beta", nullptr, gv, unused);
  const View mv = rms ? View{} : check_row_stats(c, "mean", mean, xv.rows);
  const View sv = check_row_stats(c, "rstd", rstd, xv.rows);
  View dgv, dbv;
  check_params(c, xv, nd, "dgamma", dgamma, "dbeta", dbeta, dgv, dbv);
  check_no_overlap({&dxv, &dgv, &dbv}, {&dyv, &xv, &gv, &mv, &sv}, {{&dxv, &dyv}, {&dxv, &xv}});
  if (xv.rows == 0 && !dgv && !dbv) return XVK_SUCCESS;
  xvk_norm_backward_args args{};
  args.rows = xv.rows;
  args.cols = xv.cols;
  args.dtype = xv.dtype;
  args.rms = rms;
  args.zero_centered_gamma = o.zero_centered_gamma;
  args.dy = dyv.rows_view();
  args.x = xv.rows_view();
  args.dx = dxv.rows_view();
  args.gamma = gv.base;
  args.param_dtype = gv ? gv.dtype : xv.dtype;
  args.mean = reinterpret_cast<const float *>(mv.base);
  args.rstd = reinterpret_cast<const float *>(sv.base);
  args.dgamma = dgv.base;
  args.dbeta = dbv.base;
  args.dparam_dtype = dgv ? dgv.dtype : dbv ? dbv.dtype : xv.dtype;
  return call_backend(c.ops->norm_backward, c.impl, &args);
}

}  // namespace
}  // namespace xvk

extern "C" {

XVK_API xvk_status_t xvk_layer_norm_forward(xvk_context *ctx, const DLTensor *x,
                                            const DLTensor *gamma, const DLTensor *beta,
                                            const xvk_layer_norm_options *options, DLTensor *y,
                                            DLTensor *mean, DLTensor *rstd) {
  const char *fn = "xvk_layer_norm_forward";
  return xvk::guarded(fn, [&] {
    return xvk::norm_forward(false, ctx, x, gamma, beta, xvk::read_options_of(options), y, mean, rstd);
  });
}

XVK_API xvk_status_t xvk_layer_norm_backward(xvk_context *ctx, const DLTensor *dy,
                                             const DLTensor *x, const DLTensor *gamma,
                                             const DLTensor *mean, const DLTensor *rstd,
                                             const xvk_layer_norm_options *options, DLTensor *dx,
                                             DLTensor *dgamma, DLTensor *dbeta) {
  const char *fn = "xvk_layer_norm_backward";
  return xvk::guarded(fn, [&] {
    return xvk::norm_backward(false, ctx, dy, x, gamma, mean, rstd, xvk::read_options_of(options), dx, dgamma,
                              dbeta);
  });
}

XVK_API xvk_status_t xvk_rms_norm_forward(xvk_context *ctx, const DLTensor *x,
                                          const DLTensor *gamma,
                                          const xvk_rms_norm_options *options, DLTensor *y,
                                          DLTensor *rstd) {
  const char *fn = "xvk_rms_norm_forward";
  return xvk::guarded(fn, [&] {
    return xvk::norm_forward(true, ctx, x, gamma, nullptr, xvk::read_options_of(options), y, nullptr, rstd);
  });
}

XVK_API xvk_status_t xvk_rms_norm_backward(xvk_context *ctx, const DLTensor *dy,
                                           const DLTensor *x, const DLTensor *gamma,
                                           const DLTensor *rstd,
                                           const xvk_rms_norm_options *options, DLTensor *dx,
                                           DLTensor *dgamma) {
  const char *fn = "xvk_rms_norm_backward";
  return xvk::guarded(fn, [&] {
    return xvk::norm_backward(true, ctx, dy, x, gamma, nullptr, rstd, xvk::read_options_of(options), dx,
                              dgamma, nullptr);
  });
}

}  // extern "C"
