#include "core/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <new>

namespace xvk {
namespace {

// Fixed buffers: recording an error must not allocate (it may report bad_alloc).
constexpr size_t kMessageSize = 1024;
thread_local char t_last_error[kMessageSize] = "";
thread_local char t_backend_message[kMessageSize] = "";

}  // namespace

void fail(xvk_status_t status, const char *format, ...) {
  char buffer[kMessageSize];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  throw Error{status, buffer};
}

void set_last_error(const char *function, const char *message) noexcept {
  std::snprintf(t_last_error, kMessageSize, "%s: %s", function, message);
}

void clear_backend_message() noexcept { t_backend_message[0] = '\0'; }
const char *backend_message() noexcept { return t_backend_message; }
void set_backend_message(const char *message) noexcept {
  std::snprintf(t_backend_message, kMessageSize, "%s", message ? message : "");
}

}  // namespace xvk

extern "C" {

XVK_API const char *xvk_last_error_message(void) { return xvk::t_last_error; }

XVK_API const char *xvk_status_string(xvk_status_t status) {
  switch (xvk::enum_value(status)) {  // an int: a C caller may pass any value
    case XVK_SUCCESS: return "XVK_SUCCESS";
    case XVK_ERROR_INVALID_ARGUMENT: return "XVK_ERROR_INVALID_ARGUMENT";
    case XVK_ERROR_UNSUPPORTED: return "XVK_ERROR_UNSUPPORTED";
    case XVK_ERROR_BACKEND_UNAVAILABLE: return "XVK_ERROR_BACKEND_UNAVAILABLE";
    case XVK_ERROR_OUT_OF_MEMORY: return "XVK_ERROR_OUT_OF_MEMORY";
    case XVK_ERROR_DEVICE: return "XVK_ERROR_DEVICE";
    case XVK_ERROR_INTERNAL: return "XVK_ERROR_INTERNAL";
  }
  return "XVK_STATUS_UNKNOWN";
}

XVK_API uint32_t xvk_version(void) { return XVK_VERSION; }

}  // extern "C"
