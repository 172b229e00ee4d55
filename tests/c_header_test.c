/* The public header is C99: this file is compiled with
 * -std=c99 -Wall -Wextra -Werror -pedantic, uses every _INIT macro and calls
 * the library. It exits with 0 only when every check passes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <xvk/xvk.h>

static int failures = 0;

#define EXPECT(cond)                                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, \
              __LINE__, #cond, xvk_last_error_message());                    \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

int main(void) {
  xvk_softmax_options softmax = XVK_SOFTMAX_OPTIONS_INIT;
  xvk_layer_norm_options layer_norm = XVK_LAYER_NORM_OPTIONS_INIT;
  xvk_rms_norm_options rms_norm = XVK_RMS_NORM_OPTIONS_INIT;
  xvk_context *ctx = NULL;
  float x[6] = {1, 2, 3, 0, 0, 0}, y[6], sum = 0;
  int64_t shape[2] = {2, 3};
  DLTensor tx = {NULL, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, NULL, NULL, 0};
  DLTensor ty;
  int available = -1, count = -1, i;
  const char *reason = NULL;

  tx.data = x;
  tx.shape = shape;
  ty = tx;
  ty.data = y;

  EXPECT(softmax.struct_size == sizeof(xvk_softmax_options));
  EXPECT(softmax.scale == 1.0f && softmax.causal == XVK_CAUSAL_NONE && softmax.mask == NULL);
  EXPECT(layer_norm.struct_size == sizeof(xvk_layer_norm_options) && layer_norm.epsilon == 1e-5f);
  EXPECT(layer_norm.normalized_ndim == 1 && layer_norm.residual == NULL);
  EXPECT(rms_norm.struct_size == sizeof(xvk_rms_norm_options) && rms_norm.epsilon == 1e-6f);

  EXPECT(xvk_version() == XVK_VERSION);
  EXPECT(strcmp(xvk_status_string(XVK_SUCCESS), "XVK_SUCCESS") == 0);
  EXPECT(strcmp(xvk_backend_name(XVK_BACKEND_CPU), "cpu") == 0);
  /* In C any int may arrive where an enum is expected. */
  EXPECT(strcmp(xvk_backend_name((xvk_backend_t)7), "unknown") == 0);
  EXPECT(strcmp(xvk_status_string((xvk_status_t)-1), "XVK_STATUS_UNKNOWN") == 0);
  EXPECT(xvk_backend_query((xvk_backend_t)-1, &available, &count, &reason) == XVK_ERROR_INVALID_ARGUMENT);
  EXPECT(xvk_context_create((xvk_backend_t)99, 0, &ctx) == XVK_ERROR_INVALID_ARGUMENT && ctx == NULL);
  EXPECT(xvk_backend_query(XVK_BACKEND_CPU, &available, &count, &reason) == XVK_SUCCESS);
  EXPECT(available == 1 && count == 1 && reason != NULL);

  EXPECT(xvk_context_create(XVK_BACKEND_CPU, 0, &ctx) == XVK_SUCCESS);
  softmax.scale = 2.0f;
  EXPECT(xvk_softmax_forward(ctx, &tx, &softmax, &ty) == XVK_SUCCESS);
  for (i = 0; i < 3; ++i) sum += y[i];
  EXPECT(fabsf(sum - 1.0f) < 1e-6f);
  EXPECT(fabsf(y[3] - 1.0f / 3.0f) < 1e-6f);
  EXPECT(fabsf(y[2] - 1.0f / (1.0f + expf(-2.0f) + expf(-4.0f))) < 1e-6f);

  EXPECT(xvk_rms_norm_forward(ctx, &tx, NULL, &rms_norm, &ty, NULL) == XVK_SUCCESS);
  EXPECT(fabsf(y[0] - 1.0f / sqrtf(14.0f / 3.0f + 1e-6f)) < 1e-6f);
  EXPECT(y[3] == 0.0f);

  layer_norm.epsilon = 0.0f; /* invalid: the call fails and names the field */
  EXPECT(xvk_layer_norm_forward(ctx, &tx, NULL, NULL, &layer_norm, &ty, NULL, NULL) == XVK_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(xvk_last_error_message(), "options->epsilon") != NULL);

  EXPECT(xvk_context_destroy(ctx) == XVK_SUCCESS);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c_header_test: all checks passed\n");
  return 0;
}
