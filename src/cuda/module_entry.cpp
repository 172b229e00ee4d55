// The module's shared library is built from xvk_cuda_kernels; this file only
// keeps the entry point (module.cu) from being dropped by the static link.
#include "core/backend_api.h"

extern "C" const xvk_backend_ops *xvk_backend_entry(uint32_t interface_version, const xvk_host_api *host);
extern "C" __attribute__((used)) void *const xvk_cuda_keep_entry = reinterpret_cast<void *>(&xvk_backend_entry);
