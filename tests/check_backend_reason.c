/* Usage: check_backend_reason cuda|hip MODULE_PATH
 *
 * On a machine where a GPU backend's module is built but its GPU is absent
 * (CI, and every build machine here), the loader must load the module and say
 * exactly why the backend is unusable:
 *
 *   libxvk_hip.so found at MODULE_PATH but no HIP device: hipGetDeviceCount returned N (TEXT)
 *
 * (libxvk_cuda.so, CUDA and cudaGetDeviceCount for cuda; the runtime may
 * also report zero devices: "... but no HIP device: the runtime reports 0
 * devices"). Exits 0 when it does, 1 when it does not, and 77 (CTest:
 * skipped) when the backend is usable, since a machine with that GPU cannot
 * show the no-device message. */
#include <stdio.h>
#include <string.h>

#include <xvk/xvk.h>

static int fail(const char *what, const char *reason) {
  fprintf(stderr, "FAIL: %s\n  reason: %s\n", what, reason ? reason : "(null)");
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "cuda") != 0 && strcmp(argv[1], "hip") != 0)) {
    fprintf(stderr, "usage: %s cuda|hip MODULE_PATH\n", argv[0]);
    return 2;
  }
  const int hip = strcmp(argv[1], "hip") == 0;
  const xvk_backend_t backend = hip ? XVK_BACKEND_HIP : XVK_BACKEND_CUDA;
  const char *runtime = hip ? "HIP" : "CUDA";
  int available = -1, count = -1;
  const char *reason = NULL;
  if (xvk_backend_query(backend, &available, &count, &reason) != XVK_SUCCESS)
    return fail("xvk_backend_query did not succeed", xvk_last_error_message());
  printf("%s backend: available=%d devices=%d\n  %s\n", argv[1], available, count, reason ? reason : "(null)");
  if (available) {
    printf("SKIPPED: a %s device is present, so the no-device reason cannot be checked here\n", runtime);
    return 77;
  }
  if (count != 0) return fail("device_count is not 0 for an unavailable backend", reason);

  /* "<file> found at <path> but no <RUNTIME> device: " */
  char head[4096];
  snprintf(head, sizeof head, "libxvk_%s.so found at %s but no %s device: ", argv[1], argv[2], runtime);
  if (!reason || strncmp(reason, head, strlen(head)) != 0) {
    fprintf(stderr, "expected the reason to start with: %s\n", head);
    return fail("the module was not found where it was built, or the reason has another form", reason);
  }
  const char *rest = reason + strlen(head);
  if (strcmp(rest, "the runtime reports 0 devices") == 0) return 0;

  /* "<prefix>GetDeviceCount returned <int> (<text>)" */
  char call[64];
  snprintf(call, sizeof call, "%sGetDeviceCount returned ", argv[1]);
  if (strncmp(rest, call, strlen(call)) != 0)
    return fail("the reason does not name the runtime's device-count call", reason);
  rest += strlen(call);
  if (*rest == '-') ++rest;
  if (*rest < '0' || *rest > '9') return fail("no error code after 'returned'", reason);
  while (*rest >= '0' && *rest <= '9') ++rest;
  const size_t n = strlen(rest);
  if (n < 3 || rest[0] != ' ' || rest[1] != '(' || rest[n - 1] != ')')
    return fail("the error code is not followed by its text in parentheses", reason);
  return 0;
}
