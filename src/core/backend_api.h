/*
 * The interface between libxvk's core and a backend (the built-in CPU
 * backend, and the libxvk_cuda.so / libxvk_hip.so modules). Internal: not
 * installed, not part of the public ABI. The core validates every argument
 * and hands a backend plain descriptors that are known to be consistent, so
 * backends never re-check shapes, dtypes or devices.
 *
 * Plain C so that g++, nvcc and hipcc all agree on the layout. A module and
 * the core must be built from the same tree: the core refuses a module whose
 * XVK_BACKEND_INTERFACE_VERSION differs.
 */
#ifndef XVK_CORE_BACKEND_API_H
#define XVK_CORE_BACKEND_API_H

#include <stddef.h>
#include <stdint.h>

#include "xvk/xvk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XVK_BACKEND_INTERFACE_VERSION 2
#define XVK_BACKEND_ENTRY_SYMBOL "xvk_backend_entry"

/* Element types of activations and parameters. */
typedef enum xvk_dtype_id { XVK_DTYPE_F32 = 0, XVK_DTYPE_F16 = 1, XVK_DTYPE_BF16 = 2 } xvk_dtype_id;

/* A rows x cols matrix of the op's dtype: row r starts at data + r * row_stride
 * elements and its cols elements are contiguous. data already includes the
 * DLTensor's byte_offset. data is NULL for an absent optional tensor. */
typedef struct xvk_rows_view {
  void *data;
  int64_t row_stride;
} xvk_rows_view;

/* Leading dimensions of x that a broadcast mask needs to find its row. */
#define XVK_MAX_MASK_DIMS 8

typedef struct xvk_softmax_forward_args {
  int64_t rows, cols;
  int32_t dtype; /* xvk_dtype_id of x, y and the mask */
  int32_t log;   /* nonzero: log-softmax */
  float scale;
  int32_t causal;      /* xvk_causal_t */
  int64_t causal_rows; /* rows_q: x's second-to-last dimension (when causal) */
  xvk_rows_view x, y;
  /* Optional mask. Row r's mask row starts at mask + offset(r) elements, where
   * r is decomposed into mask_ndim indices over mask_shape (innermost first)
   * and offset(r) = sum_k index_k * mask_stride[k] (0 for broadcast dims). */
  const void *mask;
  int32_t mask_ndim;
  int64_t mask_shape[XVK_MAX_MASK_DIMS];
  int64_t mask_stride[XVK_MAX_MASK_DIMS];
} xvk_softmax_forward_args;

typedef struct xvk_softmax_backward_args {
  int64_t rows, cols;
  int32_t dtype;
  int32_t log;
  float scale;
  xvk_rows_view y, dy, dx;
} xvk_softmax_backward_args;

/* LayerNorm (rms == 0) and RMSNorm (rms != 0) share their descriptors. */
typedef struct xvk_norm_forward_args {
  int64_t rows, cols;
  int32_t dtype; /* x, residual, residual_out, y */
  int32_t rms;
  float epsilon;
  int32_t zero_centered_gamma;
  xvk_rows_view x, residual, residual_out, y; /* residual(_out).data NULL when absent */
  const void *gamma, *beta;                   /* NULL when absent; cols elements each */
  int32_t param_dtype;                        /* dtype of gamma and beta */
  float *mean, *rstd;                         /* NULL when not requested; rows elements */
} xvk_norm_forward_args;

typedef struct xvk_norm_backward_args {
  int64_t rows, cols;
  int32_t dtype; /* dy, x, dx */
  int32_t rms;
  int32_t zero_centered_gamma;
  xvk_rows_view dy, x, dx;
  const void *gamma; /* NULL when absent */
  int32_t param_dtype;
  const float *mean; /* LayerNorm only */
  const float *rstd;
  void *dgamma, *dbeta; /* NULL when not requested */
  int32_t dparam_dtype;
} xvk_norm_backward_args;

/* BatchNorm: x seen as n x c x s (s = the product of the spatial dims),
 * dense, in memory order (n, c, s) or, with channels_last, (n, s, c). Every
 * activation pointer (x, z, y, dy, dx, dz) shares that layout and the dtype;
 * data pointers already include byte_offset. Parameters and statistics are
 * float32, c elements each, NULL when absent. mask: the library's ReLU bitmask
 * (xvk.h), NULL when absent. */
typedef struct xvk_batch_norm_forward_args {
  int64_t n, c, s;
  int32_t channels_last;
  int32_t dtype;
  int32_t training; /* batch statistics; else running_mean/var are read */
  int32_t relu;
  float epsilon, momentum;
  const void *x, *z;
  void *y;
  uint32_t *mask;
  const float *gamma, *beta;
  float *running_mean, *running_var; /* training: updated when given; inference: read */
  float *saved_mean, *saved_rstd;    /* training only; each may be NULL */
} xvk_batch_norm_forward_args;

typedef struct xvk_batch_norm_backward_args {
  int64_t n, c, s;
  int32_t channels_last;
  int32_t dtype;
  int32_t relu; /* g = dy where mask bit (or y > 0), else 0 */
  const void *dy, *x, *y; /* y NULL unless relu without a mask */
  const uint32_t *mask;   /* NULL unless relu with a mask */
  const float *gamma;
  const float *saved_mean, *saved_rstd;
  void *dx, *dz;          /* dz may be NULL */
  float *dgamma, *dbeta;  /* each may be NULL */
} xvk_batch_norm_backward_args;

/* Services the core offers to a backend. */
typedef struct xvk_host_api {
  uint32_t interface_version;
  /* Records the detail of a failure for this thread; the core prefixes it
   * with the entry point's name. */
  void (*set_error)(const char *message);
} xvk_host_api;

typedef struct xvk_backend_ops {
  uint32_t interface_version;
  const char *name;
  /* Number of usable devices; 0 with a reason when there are none. */
  int (*device_count)(char *reason, size_t reason_size);
  xvk_status_t (*context_create)(int device_id, void **impl);
  xvk_status_t (*context_destroy)(void *impl);
  xvk_status_t (*context_set_stream)(void *impl, void *stream);
  xvk_status_t (*context_synchronize)(void *impl);
  xvk_status_t (*memory_alloc)(void *impl, size_t bytes, void **out);
  xvk_status_t (*memory_free)(void *impl, void *ptr);
  xvk_status_t (*memory_copy)(void *impl, void *dst, const void *src, size_t bytes);
  xvk_status_t (*softmax_forward)(void *impl, const xvk_softmax_forward_args *args);
  xvk_status_t (*softmax_backward)(void *impl, const xvk_softmax_backward_args *args);
  xvk_status_t (*norm_forward)(void *impl, const xvk_norm_forward_args *args);
  xvk_status_t (*norm_backward)(void *impl, const xvk_norm_backward_args *args);
  xvk_status_t (*batch_norm_forward)(void *impl, const xvk_batch_norm_forward_args *args);
  xvk_status_t (*batch_norm_backward)(void *impl, const xvk_batch_norm_backward_args *args);
} xvk_backend_ops;

/* Each module exports exactly this function (named by XVK_BACKEND_ENTRY_SYMBOL).
 * It returns NULL when interface_version is not its own. */
typedef const xvk_backend_ops *(*xvk_backend_entry_fn)(uint32_t interface_version,
                                                       const xvk_host_api *host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XVK_CORE_BACKEND_API_H */
