/* The README's C example: LayerNorm of a 2 x 4 float32 matrix on the CPU backend. */
#include <stdio.h>
#include <xvk/xvk.h>

int main(void) {
  float x[8] = {1, 2, 3, 4, -1, 0, 1, 6}, y[8];
  int64_t shape[2] = {2, 4};
  DLTensor tx = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  xvk_layer_norm_options options = XVK_LAYER_NORM_OPTIONS_INIT; /* epsilon 1e-5, last dim */
  xvk_context *ctx = NULL;
  if (xvk_context_create(XVK_BACKEND_CPU, 0, &ctx) != XVK_SUCCESS ||
      xvk_layer_norm_forward(ctx, &tx, NULL, NULL, &options, &ty, NULL, NULL) != XVK_SUCCESS) {
    fprintf(stderr, "xvk: %s\n", xvk_last_error_message());
    return 1;
  }
  for (int i = 0; i < 8; ++i) printf("%.4f%c", y[i], i % 4 == 3 ? '\n' : ' ');
  xvk_context_destroy(ctx);
  return 0;
}
