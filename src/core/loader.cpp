// Finds, loads and probes backends once per process. The CPU backend is built
// in; GPU backends are modules dlopen()ed from XVK_BACKEND_PATH or from the
// directory libxvk itself was loaded from, so libxvk links no GPU runtime.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/context.hpp"

namespace xvk {
namespace {

struct BackendState {
  std::once_flag once;
  const xvk_backend_ops *ops = nullptr;  // non-null once the module is loaded
  int device_count = 0;
  std::string reason;  // why unusable, or a summary when usable; lives as long as the process
};

BackendState g_states[3];

const char *module_file(xvk_backend_t backend) {
  return backend == XVK_BACKEND_CUDA ? "libxvk_cuda.so" : "libxvk_hip.so";
}

std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&own_directory), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<std::string> search_directories() {
  std::vector<std::string> dirs;
  if (const char *env = std::getenv("XVK_BACKEND_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      if (end > start) dirs.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  dirs.push_back(own_directory());
  return dirs;
}

const xvk_host_api g_host = {XVK_BACKEND_INTERFACE_VERSION, &set_backend_message};

void load_module(xvk_backend_t backend, BackendState &state) {
  const char *file = module_file(backend);
  std::string searched;
  for (const std::string &dir : search_directories()) {
    const std::string path = dir + "/" + file;
    searched += (searched.empty() ? "" : ", ") + dir;
    if (access(path.c_str(), R_OK) != 0) continue;
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *why = dlerror();
      state.reason = path + " could not be loaded: " + (why ? why : "dlopen failed");
      return;
    }
    auto entry = reinterpret_cast<xvk_backend_entry_fn>(dlsym(handle, XVK_BACKEND_ENTRY_SYMBOL));
    const xvk_backend_ops *ops = entry ? entry(XVK_BACKEND_INTERFACE_VERSION, &g_host) : nullptr;
    if (!ops) {
      state.reason = path + " is not an xvk backend module of this version (interface " +
                     std::to_string(XVK_BACKEND_INTERFACE_VERSION) + ")";
      dlclose(handle);
      return;
    }
    char why[512] = "";
    state.device_count = ops->device_count(why, sizeof why);
    state.ops = ops;  // the module stays loaded for the life of the process
    if (state.device_count > 0)
      state.reason = "available: " + std::to_string(state.device_count) + " device(s), module " + path;
    else
      state.reason = std::string(file) + " found at " + path + " but " + why;
    return;
  }
  state.reason = std::string(file) + " not found (searched " + searched +
                 "; set XVK_BACKEND_PATH, or build with the matching preset)";
}

// `value` is the caller's xvk_backend_t read as an int (see enum_value).
BackendState &state_of(int value) {
  if (value != XVK_BACKEND_CPU && value != XVK_BACKEND_CUDA && value != XVK_BACKEND_HIP)
    fail(XVK_ERROR_INVALID_ARGUMENT, "backend %d is not an xvk_backend_t value", value);
  const xvk_backend_t backend = static_cast<xvk_backend_t>(value);
  BackendState &state = g_states[backend];
  std::call_once(state.once, [&] {
    if (backend == XVK_BACKEND_CPU) {
      state.ops = cpu_backend_ops();
      state.device_count = 1;
      state.reason = "available: built in";
    } else {
      load_module(backend, state);
    }
  });
  return state;
}

}  // namespace

const xvk_backend_ops &usable_backend(int backend, int *device_count) {
  BackendState &state = state_of(backend);
  if (!state.ops || state.device_count <= 0)
    fail(XVK_ERROR_BACKEND_UNAVAILABLE, "the %s backend is unavailable: %s",
         xvk_backend_name(static_cast<xvk_backend_t>(backend)),
         state.reason.c_str());
  *device_count = state.device_count;
  return *state.ops;
}

}  // namespace xvk

extern "C" {

XVK_API const char *xvk_backend_name(xvk_backend_t backend) {
  switch (xvk::enum_value(backend)) {  // an int: a C caller may pass any value
    case XVK_BACKEND_CPU: return "cpu";
    case XVK_BACKEND_CUDA: return "cuda";
    case XVK_BACKEND_HIP: return "hip";
  }
  return "unknown";
}

XVK_API xvk_status_t xvk_backend_query(xvk_backend_t backend, int *available, int *device_count,
                                       const char **reason) {
  return xvk::guarded("xvk_backend_query", [&] {
    xvk::BackendState &state = xvk::state_of(xvk::enum_value(backend));
    const bool usable = state.ops && state.device_count > 0;
    if (available) *available = usable ? 1 : 0;
    if (device_count) *device_count = usable ? state.device_count : 0;
    if (reason) *reason = state.reason.c_str();
    return XVK_SUCCESS;
  });
}

}  // extern "C"
