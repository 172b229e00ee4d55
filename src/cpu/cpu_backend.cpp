// The built-in CPU backend: synchronous, no streams, one device (0).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/context.hpp"
#include "cpu/cpu_ops.hpp"

namespace xvk::cpu {
namespace {

int device_count(char *, size_t) { return 1; }

// A CPU context keeps no state; a non-null impl keeps the contract simple.
int g_context_tag;

xvk_status_t context_create(int, void **impl) {
  *impl = &g_context_tag;
  return XVK_SUCCESS;
}
xvk_status_t context_destroy(void *) { return XVK_SUCCESS; }
xvk_status_t context_set_stream(void *, void *stream) {
  if (!stream) return XVK_SUCCESS;
  set_backend_message("the cpu backend has no streams; stream must be NULL");
  return XVK_ERROR_INVALID_ARGUMENT;
}
xvk_status_t context_synchronize(void *) { return XVK_SUCCESS; }

xvk_status_t memory_alloc(void *, size_t bytes, void **out) {
  // aligned_alloc wants a multiple of the alignment; rounding up must not
  // wrap around (SIZE_MAX would become a 0-byte allocation that "succeeds").
  constexpr size_t kAlign = 256;
  if (bytes > SIZE_MAX - (kAlign - 1)) {
    set_backend_message("out of host memory (the request exceeds the address space)");
    return XVK_ERROR_OUT_OF_MEMORY;
  }
  void *ptr = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (!ptr) {
    set_backend_message("out of host memory");
    return XVK_ERROR_OUT_OF_MEMORY;
  }
  *out = ptr;
  return XVK_SUCCESS;
}
xvk_status_t memory_free(void *, void *ptr) {
  std::free(ptr);
  return XVK_SUCCESS;
}
xvk_status_t memory_copy(void *, void *dst, const void *src, size_t bytes) {
  std::memmove(dst, src, bytes);
  return XVK_SUCCESS;
}

const xvk_backend_ops g_ops = {
    XVK_BACKEND_INTERFACE_VERSION,
    "cpu",
    &device_count,
    &context_create,
    &context_destroy,
    &context_set_stream,
    &context_synchronize,
    &memory_alloc,
    &memory_free,
    &memory_copy,
    &softmax_forward,
    &softmax_backward,
    &norm_forward,
    &norm_backward,
    &batch_norm_forward,
    &batch_norm_backward,
};

}  // namespace
}  // namespace xvk::cpu

const xvk_backend_ops *xvk::cpu_backend_ops() { return &cpu::g_ops; }
