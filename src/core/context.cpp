// Context lifetime. Live contexts are kept in a registry so that a NULL,
// destroyed or foreign pointer is reported as an error instead of being
// dereferenced.
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "core/context.hpp"

namespace xvk {
namespace {

std::shared_mutex g_registry_mutex;
std::unordered_set<const xvk_context *> g_registry;

DLDeviceType device_type_of(xvk_backend_t backend) {
  switch (backend) {
    case XVK_BACKEND_CUDA: return kDLCUDA;
    case XVK_BACKEND_HIP: return kDLROCM;
    default: return kDLCPU;
  }
}

}  // namespace

xvk_context &live_context(const xvk_context *ctx) {
  if (!ctx) fail(XVK_ERROR_INVALID_ARGUMENT, "ctx is NULL");
  std::shared_lock<std::shared_mutex> lock(g_registry_mutex);
  if (!g_registry.count(ctx))
    fail(XVK_ERROR_INVALID_ARGUMENT,
         "ctx is not a live context (already destroyed, or not made by xvk_context_create)");
  return *const_cast<xvk_context *>(ctx);
}

}  // namespace xvk

extern "C" {

XVK_API xvk_status_t xvk_context_create(xvk_backend_t backend_arg, int device_id, xvk_context **out) {
  return xvk::guarded("xvk_context_create", [&] {
    if (!out) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "out is NULL");
    int device_count = 0;
    const xvk_backend_ops &ops = xvk::usable_backend(xvk::enum_value(backend_arg), &device_count);
    const xvk_backend_t backend = backend_arg;  // a known value now
    if (device_id < 0 || device_id >= device_count)
      xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "device_id %d is out of range: the %s backend has %d device(s)",
                device_id, xvk_backend_name(backend), device_count);
    auto *ctx = new xvk_context{backend, xvk::device_type_of(backend), device_id, &ops, nullptr};
    const xvk_status_t status = xvk::call_backend(ops.context_create, device_id, &ctx->impl);
    if (status != XVK_SUCCESS) {
      delete ctx;
      return status;
    }
    try {
      std::unique_lock<std::shared_mutex> lock(xvk::g_registry_mutex);
      xvk::g_registry.insert(ctx);
    } catch (...) {
      ops.context_destroy(ctx->impl);
      delete ctx;
      throw;
    }
    *out = ctx;
    return XVK_SUCCESS;
  });
}

XVK_API xvk_status_t xvk_context_destroy(xvk_context *ctx) {
  return xvk::guarded("xvk_context_destroy", [&] {
    if (!ctx) return XVK_SUCCESS;
    {
      std::unique_lock<std::shared_mutex> lock(xvk::g_registry_mutex);
      if (!xvk::g_registry.erase(ctx))
        xvk::fail(XVK_ERROR_INVALID_ARGUMENT,
                  "ctx is not a live context (already destroyed, or not made by xvk_context_create)");
    }
    const xvk_status_t status = xvk::call_backend(ctx->ops->context_destroy, ctx->impl);
    delete ctx;
    return status;
  });
}

XVK_API xvk_status_t xvk_context_set_stream(xvk_context *ctx, void *stream) {
  return xvk::guarded("xvk_context_set_stream", [&] {
    xvk_context &c = xvk::live_context(ctx);
    return xvk::call_backend(c.ops->context_set_stream, c.impl, stream);
  });
}

XVK_API xvk_status_t xvk_context_synchronize(xvk_context *ctx) {
  return xvk::guarded("xvk_context_synchronize", [&] {
    xvk_context &c = xvk::live_context(ctx);
    return xvk::call_backend(c.ops->context_synchronize, c.impl);
  });
}

XVK_API xvk_status_t xvk_context_get_device(const xvk_context *ctx, xvk_backend_t *backend,
                                            int *device_id) {
  return xvk::guarded("xvk_context_get_device", [&] {
    const xvk_context &c = xvk::live_context(ctx);
    if (backend) *backend = c.backend;
    if (device_id) *device_id = c.device_id;
    return XVK_SUCCESS;
  });
}

XVK_API xvk_status_t xvk_memory_alloc(xvk_context *ctx, size_t bytes, void **out) {
  return xvk::guarded("xvk_memory_alloc", [&] {
    xvk_context &c = xvk::live_context(ctx);
    if (!out) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "out is NULL");
    void *ptr = nullptr;
    if (bytes > 0) {
      const xvk_status_t status = xvk::call_backend(c.ops->memory_alloc, c.impl, bytes, &ptr);
      if (status != XVK_SUCCESS) return status;
    }
    *out = ptr;
    return XVK_SUCCESS;
  });
}

XVK_API xvk_status_t xvk_memory_free(xvk_context *ctx, void *ptr) {
  return xvk::guarded("xvk_memory_free", [&] {
    xvk_context &c = xvk::live_context(ctx);
    return ptr ? xvk::call_backend(c.ops->memory_free, c.impl, ptr) : XVK_SUCCESS;
  });
}

XVK_API xvk_status_t xvk_memory_copy(xvk_context *ctx, void *dst, const void *src, size_t bytes) {
  return xvk::guarded("xvk_memory_copy", [&] {
    xvk_context &c = xvk::live_context(ctx);
    if (bytes == 0) return XVK_SUCCESS;
    if (!dst) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "dst is NULL");
    if (!src) xvk::fail(XVK_ERROR_INVALID_ARGUMENT, "src is NULL");
    return xvk::call_backend(c.ops->memory_copy, c.impl, dst, src, bytes);
  });
}

}  // extern "C"
