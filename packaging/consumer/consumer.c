/* A program outside the xvk tree, built against an installed xvk (find_package or pkg-config):
 * it checks the header and library versions agree, then runs LayerNorm on the CPU backend
 * and checks one value. */
#include <math.h>
#include <stdio.h>
#include <xvk/xvk.h>

int main(void) {
  float x[4] = {1, 2, 3, 4}, y[4];
  int64_t shape[1] = {4};
  DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  xvk_context *ctx = NULL;
  if (xvk_version() != XVK_VERSION) {
    fprintf(stderr, "header version %d, library version %u\n", XVK_VERSION, (unsigned)xvk_version());
    return 1;
  }
  if (xvk_context_create(XVK_BACKEND_CPU, 0, &ctx) != XVK_SUCCESS ||
      xvk_layer_norm_forward(ctx, &tx, NULL, NULL, NULL, &ty, NULL, NULL) != XVK_SUCCESS) {
    fprintf(stderr, "xvk: %s\n", xvk_last_error_message());
    return 1;
  }
  xvk_context_destroy(ctx);
  /* mean 2.5, variance 1.25: y[0] = -1.5 / sqrt(1.25 + 1e-5) */
  const double expected = -1.5 / sqrt(1.25 + 1e-5);
  const unsigned v = (unsigned)xvk_version();
  printf("xvk %u.%u.%u: layer_norm y[0] = %.6f (expected %.6f)\n", v / 10000, v / 100 % 100, v % 100, y[0],
         expected);
  return fabs(y[0] - expected) < 1e-5 ? 0 : 1;
}
