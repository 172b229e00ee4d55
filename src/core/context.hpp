// Contexts and backends as the core sees them.
#pragma once

#include "core/backend_api.h"
#include "core/error.hpp"

struct xvk_context {
  xvk_backend_t backend;
  DLDeviceType device_type;  // the DLPack device type this backend's tensors carry
  int device_id;
  const xvk_backend_ops *ops;
  void *impl;  // the backend's own state
};

namespace xvk {

// The backend's operations, loading its module on first use; throws
// XVK_ERROR_BACKEND_UNAVAILABLE with the reason when it cannot be used.
// `backend` is the caller's xvk_backend_t read with enum_value(); an unknown
// value is XVK_ERROR_INVALID_ARGUMENT.
const xvk_backend_ops &usable_backend(int backend, int *device_count);

// ctx itself, once it is known to be a live context; throws otherwise.
// Never dereferences a pointer that is not live.
xvk_context &live_context(const xvk_context *ctx);

// Calls a backend operation, so that the message it leaves is this call's.
template <class Fn, class... Args>
xvk_status_t call_backend(Fn fn, Args... args) {
  clear_backend_message();
  return fn(args...);
}

// The built-in CPU backend.
const xvk_backend_ops *cpu_backend_ops();

}  // namespace xvk
