/*
 * xvk: fused deep-learning kernels behind a stable C ABI.
 *
 * This header is the whole public API. It is C99 and compiles as C++.
 * Conventions (see DESIGN.md for the full contract):
 *  - Every function returns xvk_status_t; XVK_SUCCESS is 0. On failure
 *    xvk_last_error_message() names the offending argument, and no output is
 *    written.
 *  - Tensors are DLPack DLTensors. strides == NULL means contiguous row-major.
 *    "Rows" are the leading dimensions: they may be strided, as long as they
 *    collapse to a single row stride (for example a column slice of a larger
 *    matrix). The normalized/softmax (trailing) dimensions must be contiguous.
 *    Strides of dimensions of size 1 are ignored.
 *  - dtypes: float32, float16, bfloat16 (arithmetic is float32 or wider).
 *  - Every tensor's device must match the context's backend
 *    (kDLCPU, kDLCUDA, kDLROCM) and device id.
 *  - Operators run asynchronously on the context's stream (the CPU backend
 *    runs them before returning).
 *  - An output may be the very same memory as an input where a function says
 *    so (in-place); any other overlap between an output and another tensor is
 *    rejected.
 */
#ifndef XVK_XVK_H
#define XVK_XVK_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#define XVK_VERSION_MAJOR 0
#define XVK_VERSION_MINOR 1
#define XVK_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, the same encoding xvk_version() returns. */
#define XVK_VERSION (XVK_VERSION_MAJOR * 10000 + XVK_VERSION_MINOR * 100 + XVK_VERSION_PATCH)

#if defined(_WIN32) && defined(XVK_BUILDING_LIBRARY)
#define XVK_API __declspec(dllexport)
#elif defined(_WIN32)
#define XVK_API __declspec(dllimport)
#elif defined(XVK_BUILDING_LIBRARY)
#define XVK_API __attribute__((visibility("default")))
#else
#define XVK_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status, errors, versions                                                  */
/* ------------------------------------------------------------------------ */

typedef enum xvk_status_t {
  XVK_SUCCESS = 0,
  XVK_ERROR_INVALID_ARGUMENT = 1,    /* the call is wrong: fix the caller */
  XVK_ERROR_UNSUPPORTED = 2,         /* valid, but this library cannot do it (dtype, layout) */
  XVK_ERROR_BACKEND_UNAVAILABLE = 3, /* module or device missing; see xvk_backend_query */
  XVK_ERROR_OUT_OF_MEMORY = 4,       /* host or device allocation failed */
  XVK_ERROR_DEVICE = 5,              /* the GPU runtime reported an error */
  XVK_ERROR_INTERNAL = 6             /* a bug in xvk: please report it */
} xvk_status_t;

/* This thread's last failure message, "" if no call on this thread has failed.
 * Successful calls do not clear it. The pointer stays valid until the next
 * failing xvk call on the same thread. */
XVK_API const char *xvk_last_error_message(void);

/* A static name for a status ("XVK_ERROR_INVALID_ARGUMENT"); never NULL. */
XVK_API const char *xvk_status_string(xvk_status_t status);

/* The library's version at run time, encoded like XVK_VERSION. */
XVK_API uint32_t xvk_version(void);

/* ------------------------------------------------------------------------ */
/* Backends and contexts                                                     */
/* ------------------------------------------------------------------------ */

typedef enum xvk_backend_t {
  XVK_BACKEND_CPU = 0,  /* built into libxvk; always available */
  XVK_BACKEND_CUDA = 1, /* libxvk_cuda.so, kDLCUDA tensors */
  XVK_BACKEND_HIP = 2   /* libxvk_hip.so, kDLROCM tensors */
} xvk_backend_t;

/* A static lowercase name ("cpu", "cuda", "hip"), or "unknown". */
XVK_API const char *xvk_backend_name(xvk_backend_t backend);

/* Says whether a backend can be used, loading its module on first use.
 * GPU modules are searched for in the directories of XVK_BACKEND_PATH
 * (colon-separated), then in the directory that holds libxvk itself.
 * *available is 1 or 0; *device_count is the number of usable devices;
 * *reason is a static, human-readable explanation ("available: 1 device" or
 * why not). Each output pointer may be NULL. Fails only for an unknown
 * backend value; an unusable backend is reported through *available. */
XVK_API xvk_status_t xvk_backend_query(xvk_backend_t backend, int *available, int *device_count,
                                       const char **reason);

/* A context binds a backend, a device and a stream. One context is used by
 * one thread at a time; different contexts may be used from different
 * threads concurrently. Scratch memory is cached in the context. */
typedef struct xvk_context xvk_context;

/* Creates a context on device_id of backend (the CPU backend has device 0
 * only). GPU contexts start on the default (NULL) stream. */
XVK_API xvk_status_t xvk_context_create(xvk_backend_t backend, int device_id, xvk_context **out);

/* Sets the stream operators are enqueued on: a cudaStream_t or hipStream_t
 * passed as void*, NULL for the default stream. The CPU backend takes NULL
 * only. The stream must outlive its use by the context. */
XVK_API xvk_status_t xvk_context_set_stream(xvk_context *ctx, void *stream);

/* Blocks the calling thread until all work enqueued through ctx is done. */
XVK_API xvk_status_t xvk_context_synchronize(xvk_context *ctx);

/* Waits for the context's work, then frees it. ctx may be NULL (no-op);
 * a pointer that is not a live context is an error, not a crash. */
XVK_API xvk_status_t xvk_context_destroy(xvk_context *ctx);

/* Reads back a context's backend and device id; either output may be NULL. */
XVK_API xvk_status_t xvk_context_get_device(const xvk_context *ctx, xvk_backend_t *backend,
                                            int *device_id);

/* Memory on the context's device, for callers without a GPU runtime of their
 * own (the demo, bindings, tests). Frameworks can keep using their allocator.
 * xvk_memory_alloc returns bytes of device memory (host memory on the CPU
 * backend), aligned to at least 256 bytes; bytes == 0 gives NULL.
 * xvk_memory_free frees it after the context's queued work is done; NULL is a
 * no-op. xvk_memory_copy copies bytes between any two of host memory and the
 * context's device memory, ordered on the context's stream: host memory it
 * writes is ready after xvk_context_synchronize. */
XVK_API xvk_status_t xvk_memory_alloc(xvk_context *ctx, size_t bytes, void **out);
XVK_API xvk_status_t xvk_memory_free(xvk_context *ctx, void *ptr);
XVK_API xvk_status_t xvk_memory_copy(xvk_context *ctx, void *dst, const void *src, size_t bytes);

/* ------------------------------------------------------------------------ */
/* Options structs                                                           */
/*                                                                           */
/* The first member is struct_size: set it to sizeof(the struct), or start   */
/* from the XVK_*_OPTIONS_INIT initializer. Later minor versions append      */
/* fields; a caller built against an older header passes a smaller size and  */
/* gets the defaults of the fields it does not know. A size smaller than the */
/* first published version or larger than this library knows is rejected.   */
/* A NULL options pointer means the defaults.                                */
/* ------------------------------------------------------------------------ */

typedef enum xvk_causal_t {
  XVK_CAUSAL_NONE = 0,
  /* row i of each (rows_q x cols) matrix keeps columns j <= i (PyTorch's
   * is_causal convention) */
  XVK_CAUSAL_TOP_LEFT = 1,
  /* row i keeps columns j <= i + (cols - rows_q): the last query sees every
   * key (the KV-cache convention) */
  XVK_CAUSAL_BOTTOM_RIGHT = 2
} xvk_causal_t;

typedef struct xvk_softmax_options {
  uint32_t struct_size; /* sizeof(xvk_softmax_options) */
  float scale;          /* x is multiplied by scale first; finite; default 1 */
  int32_t causal;       /* an xvk_causal_t; needs x.ndim >= 2; default NONE */
  /* Optional additive mask added after scaling, of x's dtype, broadcast to
   * x by NumPy rules (aligned at the last dimension, size-1 or missing
   * leading dimensions broadcast); its last dimension equals x's and is
   * contiguous. Use -inf to mask an element out. */
  const DLTensor *mask;
} xvk_softmax_options;
#define XVK_SOFTMAX_OPTIONS_INIT { sizeof(xvk_softmax_options), 1.0f, XVK_CAUSAL_NONE, NULL }

typedef struct xvk_layer_norm_options {
  uint32_t struct_size;        /* sizeof(xvk_layer_norm_options) */
  float epsilon;               /* > 0 and finite; default 1e-5; used by forward only */
  int32_t normalized_ndim;     /* trailing dimensions normalized over; 0 means 1; default 1 */
  int32_t zero_centered_gamma; /* nonzero: scale by (1 + gamma) instead of gamma */
  /* Forward only (must be NULL for the backward): */
  const DLTensor *residual; /* optional: normalize x + residual (same shape and dtype as x) */
  DLTensor *residual_out;   /* optional, needs residual: also write x + residual */
} xvk_layer_norm_options;
#define XVK_LAYER_NORM_OPTIONS_INIT { sizeof(xvk_layer_norm_options), 1e-5f, 1, 0, NULL, NULL }

typedef struct xvk_rms_norm_options {
  uint32_t struct_size;        /* sizeof(xvk_rms_norm_options) */
  float epsilon;               /* > 0 and finite; default 1e-6; used by forward only */
  int32_t normalized_ndim;     /* trailing dimensions normalized over; 0 means 1; default 1 */
  int32_t zero_centered_gamma; /* nonzero: scale by (1 + gamma) instead of gamma */
  /* Forward only (must be NULL for the backward): */
  const DLTensor *residual; /* optional: normalize x + residual (same shape and dtype as x) */
  DLTensor *residual_out;   /* optional, needs residual: also write x + residual */
} xvk_rms_norm_options;
#define XVK_RMS_NORM_OPTIONS_INIT { sizeof(xvk_rms_norm_options), 1e-6f, 1, 0, NULL, NULL }

/* ------------------------------------------------------------------------ */
/* Softmax and log-softmax over the last dimension                           */
/* ------------------------------------------------------------------------ */

/* y = softmax(scale * x + mask) over the last dimension, with causal masking
 * if asked. x and y have the same shape and dtype; y may be x (in-place).
 * Every element of y is written. A row whose every element is masked (or
 * -inf) gives zeros; a NaN in a row makes that row NaN. */
XVK_API xvk_status_t xvk_softmax_forward(xvk_context *ctx, const DLTensor *x,
                                         const xvk_softmax_options *options, DLTensor *y);

/* y = log_softmax(scale * x + mask): as xvk_softmax_forward, except that a
 * fully masked row gives -inf. */
XVK_API xvk_status_t xvk_log_softmax_forward(xvk_context *ctx, const DLTensor *x,
                                             const xvk_softmax_options *options, DLTensor *y);

/* Gradient of xvk_softmax_forward from its output y and the output gradient
 * dy: dx = scale * y * (dy - sum(dy * y)) per row. y, dy, dx share shape and
 * dtype; dx may be dy (in-place). options: only scale is used (mask and
 * causal must be unset: their effect is already in y). */
XVK_API xvk_status_t xvk_softmax_backward(xvk_context *ctx, const DLTensor *y, const DLTensor *dy,
                                          const xvk_softmax_options *options, DLTensor *dx);

/* Gradient of xvk_log_softmax_forward from its output y:
 * dx = scale * (dy - exp(y) * sum(dy)) per row. Same rules as
 * xvk_softmax_backward. */
XVK_API xvk_status_t xvk_log_softmax_backward(xvk_context *ctx, const DLTensor *y,
                                              const DLTensor *dy,
                                              const xvk_softmax_options *options, DLTensor *dx);

/* ------------------------------------------------------------------------ */
/* LayerNorm                                                                 */
/* ------------------------------------------------------------------------ */

/* Normalizes x over its trailing options->normalized_ndim dimensions (their
 * product is the normalized size N; the leading dimensions are rows):
 *   h = x (+ residual), y = (h - mean) * rstd * g + beta,
 *   rstd = 1 / sqrt(var + epsilon), var the biased variance over N,
 *   g = gamma, or 1 + gamma with zero_centered_gamma.
 * gamma and beta are optional (absent: 1 and 0); each has N elements and the
 * shape of the normalized dimensions, dtype of x or float32, contiguous.
 * y: x's shape and dtype; may be x or residual (in-place).
 * mean, rstd: optional float32 outputs with one element per row, contiguous.
 * residual_out (if given) receives h in x's dtype. */
XVK_API xvk_status_t xvk_layer_norm_forward(xvk_context *ctx, const DLTensor *x,
                                            const DLTensor *gamma, const DLTensor *beta,
                                            const xvk_layer_norm_options *options, DLTensor *y,
                                            DLTensor *mean, DLTensor *rstd);

/* Gradient of xvk_layer_norm_forward. x is the forward's normalized input (h
 * when a residual was fused), mean and rstd the forward's saved statistics
 * (required), gamma as given to the forward (optional). Writes dx (x's shape
 * and dtype; may be dy or x, in-place) and, when not NULL, dgamma = sum over
 * rows of dy * xhat and dbeta = sum over rows of dy (N elements, dtype of x or
 * float32). Reductions over rows are deterministic: the same inputs give
 * bitwise the same outputs. */
XVK_API xvk_status_t xvk_layer_norm_backward(xvk_context *ctx, const DLTensor *dy,
                                             const DLTensor *x, const DLTensor *gamma,
                                             const DLTensor *mean, const DLTensor *rstd,
                                             const xvk_layer_norm_options *options, DLTensor *dx,
                                             DLTensor *dgamma, DLTensor *dbeta);

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */
/* ------------------------------------------------------------------------ */

/* y = h * rstd * g with h = x (+ residual), rstd = 1 / sqrt(mean(h^2) +
 * epsilon) over the trailing normalized_ndim dimensions, g = gamma (or
 * 1 + gamma with zero_centered_gamma; absent gamma means 1). Shapes, dtypes,
 * in-place and residual rules as xvk_layer_norm_forward; rstd is optional. */
XVK_API xvk_status_t xvk_rms_norm_forward(xvk_context *ctx, const DLTensor *x,
                                          const DLTensor *gamma,
                                          const xvk_rms_norm_options *options, DLTensor *y,
                                          DLTensor *rstd);

/* Gradient of xvk_rms_norm_forward from dy, the forward's input x (h), its
 * saved rstd (required) and gamma (optional). Writes dx and, when not NULL,
 * dgamma = sum over rows of dy * h * rstd. Deterministic. */
XVK_API xvk_status_t xvk_rms_norm_backward(xvk_context *ctx, const DLTensor *dy,
                                           const DLTensor *x, const DLTensor *gamma,
                                           const DLTensor *rstd,
                                           const xvk_rms_norm_options *options, DLTensor *dx,
                                           DLTensor *dgamma);

/* ------------------------------------------------------------------------ */
/* BatchNorm, with fused ReLU and Add+ReLU                                   */
/* ------------------------------------------------------------------------ */

typedef enum xvk_activation_t {
  XVK_ACTIVATION_NONE = 0,
  XVK_ACTIVATION_RELU = 1 /* max(v, 0); NaN stays NaN */
} xvk_activation_t;

typedef struct xvk_batch_norm_options {
  uint32_t struct_size; /* sizeof(xvk_batch_norm_options) */
  float epsilon;        /* > 0 and finite; default 1e-5 */
  /* Training forward: running = (1 - momentum) * running + momentum * batch
   * statistic (the running variance takes the unbiased batch variance);
   * in [0, 1]; default 0.1. */
  float momentum;
  int32_t activation; /* an xvk_activation_t applied after the (optional) add; default NONE */
  /* Which dimension of x holds the channels: 1 for (N, C, spatial...) shapes
   * (PyTorch's logical shape, whatever its memory format), or -1 (or
   * ndim - 1) for (N, spatial..., C) shapes. Default 1. */
  int32_t channel_axis;
} xvk_batch_norm_options;
#define XVK_BATCH_NORM_OPTIONS_INIT \
  { sizeof(xvk_batch_norm_options), 1e-5f, 0.1f, XVK_ACTIVATION_NONE, 1 }

/* BatchNorm normalizes each channel of x over all its other dimensions
 * (M = N * spatial values per channel). x has ndim >= 2: N first, C at
 * options->channel_axis, any number of spatial dimensions (none: the (N, C)
 * case). x must be dense in one of two memory orders, told apart by its
 * strides: channels-first (N, C, spatial: PyTorch's contiguous format) or
 * channels-last (N, spatial, C: PyTorch's channels_last, or plain NHWC).
 * Any other strides give XVK_ERROR_UNSUPPORTED. Every activation-shaped
 * tensor of a call (x, z, y, dy, dx, dz) has x's shape, dtype and memory
 * order. Parameters and statistics (gamma, beta, running_mean, running_var,
 * saved_mean, saved_rstd, dgamma, dbeta) are float32, contiguous, with C
 * elements (any shape of C elements).
 *
 *   v = (x - mean) * rstd * gamma + beta (+ z),  y = activation(v)
 *
 * gamma and beta are optional (absent: 1 and 0); z is optional (the residual
 * of Add+ReLU).
 *
 * The ReLU mask: with XVK_ACTIVATION_RELU the forward can write a bitmask of
 * "y > 0" (of y as stored), which the backward reads instead of y. Bit i is
 * bit (i % 32) of 32-bit word i / 32, where i is the element's position in
 * x's memory order (its offset from the first element, in elements); the
 * bits past the last element of the last word are 0. The layout does not
 * depend on the backend or the GPU: a mask written by one backend is read by
 * any other. The mask tensor has dtype uint32 (or int32), is contiguous and
 * has exactly xvk_batch_norm_mask_words() elements. */

/* The number of 32-bit words of the ReLU mask of a tensor shaped like x:
 * ceil(elements / 32). Only x's shape is used; x->data may be NULL. */
XVK_API xvk_status_t xvk_batch_norm_mask_words(const DLTensor *x, int64_t *words);

/* Training forward: the batch mean and biased variance of each channel
 * (Welford, fp32 or wider), y as above with rstd = 1 / sqrt(var + epsilon).
 * Optional outputs: mask (needs XVK_ACTIVATION_RELU); saved_mean and
 * saved_rstd (the batch mean and rstd, for the backward); running_mean and
 * running_var (given together, updated in place with options->momentum and
 * the unbiased variance). Needs M > 1. y may be x or z (in-place). */
XVK_API xvk_status_t xvk_batch_norm_forward_training(
    xvk_context *ctx, const DLTensor *x, const DLTensor *z, const DLTensor *gamma,
    const DLTensor *beta, const xvk_batch_norm_options *options, DLTensor *y, DLTensor *mask,
    DLTensor *running_mean, DLTensor *running_var, DLTensor *saved_mean, DLTensor *saved_rstd);

/* Inference forward from the running statistics (required):
 * mean = running_mean, rstd = 1 / sqrt(running_var + epsilon). z and mask
 * as for training. y may be x or z (in-place). */
XVK_API xvk_status_t xvk_batch_norm_forward_inference(
    xvk_context *ctx, const DLTensor *x, const DLTensor *z, const DLTensor *gamma,
    const DLTensor *beta, const DLTensor *running_mean, const DLTensor *running_var,
    const xvk_batch_norm_options *options, DLTensor *y, DLTensor *mask);

/* Backward of the training forward, from the output gradient dy, the
 * forward's x, its saved_mean and saved_rstd (required) and gamma (optional).
 * With XVK_ACTIVATION_RELU, exactly one of mask (from the forward) or y (the
 * forward's output) says where y > 0; with NONE both are NULL. With
 * g = dy where y > 0 (else 0), or g = dy without activation,
 * xhat = (x - mean) * rstd:
 *   dbeta = sum(g), dgamma = sum(g * xhat)                 (per channel)
 *   dx = gamma * rstd * (g - dbeta / M - xhat * dgamma / M)
 *   dz = g                                   (the gradient of Add+ReLU's z)
 * dx is required (may be dy or x, in-place); dz (may be dy), dgamma and
 * dbeta are optional. dy and x must have the memory order the forward saw
 * (the mask follows it). Reductions are deterministic: the same inputs give
 * bitwise the same outputs. */
XVK_API xvk_status_t xvk_batch_norm_backward(
    xvk_context *ctx, const DLTensor *dy, const DLTensor *x, const DLTensor *mask,
    const DLTensor *y, const DLTensor *gamma, const DLTensor *saved_mean,
    const DLTensor *saved_rstd, const xvk_batch_norm_options *options, DLTensor *dx, DLTensor *dz,
    DLTensor *dgamma, DLTensor *dbeta);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XVK_XVK_H */
