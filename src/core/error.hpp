// Error handling inside libxvk: validation and backends throw xvk::Error,
// and every C entry point runs its body through xvk::guarded(), which turns
// any exception into a status plus this thread's message. Nothing throws
// across the C ABI.
#pragma once

#include <cstring>
#include <string>

#include "xvk/xvk.h"

namespace xvk {

struct Error {
  xvk_status_t status;
  std::string message;
};

// Throws Error{status, printf-style message}.
[[noreturn]] void fail(xvk_status_t status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

// Records "function: message" as this thread's last error.
void set_last_error(const char *function, const char *message) noexcept;

// Message a backend left through xvk_host_api::set_error during the current
// call ("" if none); cleared before each backend call.
void clear_backend_message() noexcept;
const char *backend_message() noexcept;
void set_backend_message(const char *message) noexcept;

// The int a caller passed for an enum parameter (xvk_backend_t,
// xvk_status_t). C lets any int through, but loading an enum object whose
// value lies outside the enum's range is undefined behaviour in C++ (and
// UBSan aborts on it), so entry points read enum arguments through this and
// validate the int before converting it back.
template <class Enum>
int enum_value(const Enum &value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &value, sizeof v);
  return v;
}

// Runs body (returning xvk_status_t) and maps every exception to a status.
template <class Body>
xvk_status_t guarded(const char *function, Body &&body) noexcept {
  try {
    xvk_status_t status = body();
    if (status != XVK_SUCCESS) {
      const char *detail = backend_message();
      set_last_error(function, *detail ? detail : xvk_status_string(status));
    }
    return status;
  } catch (const Error &e) {
    set_last_error(function, e.message.c_str());
    return e.status;
  } catch (const std::bad_alloc &) {
    set_last_error(function, "out of host memory");
    return XVK_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception &e) {
    set_last_error(function, e.what());
    return XVK_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(function, "unknown internal exception");
    return XVK_ERROR_INTERNAL;
  }
}

}  // namespace xvk
