// The GPU backend module (libxvk_cuda.so; libxvk_hip.so from the same file):
// its entry point, device discovery, contexts, memory, and the table of
// operations that libxvk's loader receives.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "cuda/launch.cuh"

namespace xvk::gpu {
namespace {

const xvk_host_api *g_host = nullptr;

void report(const char *message) {
  if (g_host) g_host->set_error(message);
}

// Runs an operation, mapping any C++ exception to a status: nothing throws
// across the module boundary.
template <class Body>
xvk_status_t guarded(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    report("out of host memory");
    return XVK_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    report("unexpected exception in the GPU backend");
    return XVK_ERROR_INTERNAL;
  }
}

constexpr int kMaxDevices = 64;
DeviceInfo g_devices[kMaxDevices];
std::once_flag g_device_once[kMaxDevices];

// Makes ctx's device current on this thread (contexts may move between threads).
xvk_status_t use_device(const Context &ctx) {
  int current = -1;
  if (get_device(&current) == kSuccess && current == ctx.device) return XVK_SUCCESS;
  const error_t e = set_device(ctx.device);
  return e == kSuccess ? XVK_SUCCESS : device_error("setting the device", e);
}

int device_count(char *reason, size_t reason_size) {
  int n = 0;
  const error_t e = get_device_count(&n);
  if (e != kSuccess) {
    std::snprintf(reason, reason_size, "no %s device: %sGetDeviceCount returned %d (%s)", kRuntimeName,
                  kBackendName, int(e), error_string(e));
    (void)get_last_error();  // clear the sticky error
    return 0;
  }
  if (n == 0) std::snprintf(reason, reason_size, "no %s device: the runtime reports 0 devices", kRuntimeName);
  return n > kMaxDevices ? kMaxDevices : n;
}

xvk_status_t context_create(int device_id, void **impl) {
  return guarded([&] {
    const DeviceInfo &info = device_info(device_id);
    if (info.sm_count == 0) {
      report("could not read the device's properties");
      return XVK_ERROR_DEVICE;
    }
    auto *ctx = new Context;
    ctx->device = device_id;
    ctx->info = &info;
    *impl = ctx;
    return XVK_SUCCESS;
  });
}

xvk_status_t context_synchronize(void *impl) {
  auto &ctx = *static_cast<Context *>(impl);
  xvk_status_t s = use_device(ctx);
  if (s != XVK_SUCCESS) return s;
  const error_t e = stream_synchronize(ctx.stream);
  return e == kSuccess ? XVK_SUCCESS : device_error("synchronizing the stream", e);
}

xvk_status_t context_destroy(void *impl) {
  auto *ctx = static_cast<Context *>(impl);
  xvk_status_t status = context_synchronize(impl);
  if (ctx->scratch) (void)free_device(ctx->scratch);
  if (ctx->counters) (void)free_device(ctx->counters);
  delete ctx;
  return status;
}

xvk_status_t context_set_stream(void *impl, void *stream) {
  static_cast<Context *>(impl)->stream = static_cast<stream_t>(stream);
  return XVK_SUCCESS;
}

xvk_status_t memory_alloc(void *impl, size_t bytes, void **out) {
  auto &ctx = *static_cast<Context *>(impl);
  xvk_status_t s = use_device(ctx);
  if (s != XVK_SUCCESS) return s;
  const error_t e = malloc_device(out, bytes);
  return e == kSuccess ? XVK_SUCCESS : device_error("allocating device memory", e);
}

xvk_status_t memory_free(void *impl, void *ptr) {
  auto &ctx = *static_cast<Context *>(impl);
  xvk_status_t s = use_device(ctx);
  if (s != XVK_SUCCESS) return s;
  const error_t e = free_device(ptr);
  return e == kSuccess ? XVK_SUCCESS : device_error("freeing device memory", e);
}

xvk_status_t memory_copy(void *impl, void *dst, const void *src, size_t bytes) {
  auto &ctx = *static_cast<Context *>(impl);
  xvk_status_t s = use_device(ctx);
  if (s != XVK_SUCCESS) return s;
  const error_t e = memcpy_async(dst, src, bytes, ctx.stream);
  return e == kSuccess ? XVK_SUCCESS : device_error("copying memory", e);
}

template <class Args, xvk_status_t (*Op)(Context &, const Args &, const Config *)>
xvk_status_t run_op(void *impl, const Args *args) {
  return guarded([&] {
    auto &ctx = *static_cast<Context *>(impl);
    xvk_status_t s = use_device(ctx);
    return s == XVK_SUCCESS ? Op(ctx, *args, nullptr) : s;
  });
}

const xvk_backend_ops g_ops = {
    XVK_BACKEND_INTERFACE_VERSION,
    kBackendName,
    &device_count,
    &context_create,
    &context_destroy,
    &context_set_stream,
    &context_synchronize,
    &memory_alloc,
    &memory_free,
    &memory_copy,
    &run_op<xvk_softmax_forward_args, softmax_forward>,
    &run_op<xvk_softmax_backward_args, softmax_backward>,
    &run_op<xvk_norm_forward_args, norm_forward>,
    &run_op<xvk_norm_backward_args, norm_backward>,
    &run_op<xvk_batch_norm_forward_args, batch_norm_forward>,
    &run_op<xvk_batch_norm_backward_args, batch_norm_backward>,
};

}  // namespace

#if !XVK_GPU_HIP
// Built with the library's architecture list like every kernel: whether the
// code device `id` runs was compiled for sm_90 or later, so that it has the
// wait launch_kernel's overlap relies on (wait_for_prior_kernel is empty
// in code built for older architectures, as an sm_80-only build run on an
// H100 would be).
__global__ void architecture_probe() { wait_for_prior_kernel(); }

bool runs_sm90_code(int id) {
  int current = -1;
  if (get_device(&current) != kSuccess || set_device(id) != kSuccess) {
    (void)get_last_error();
    return false;
  }
  const bool sm90 = kernel_ptx_version(architecture_probe) >= 90;
  (void)set_device(current);
  return sm90;
}
#endif

const DeviceInfo &device_info(int id) {
  static DeviceInfo invalid;
  if (id < 0 || id >= kMaxDevices) return invalid;
  std::call_once(g_device_once[id], [id] {
    device_prop_t prop;
    if (get_device_properties(&prop, id) != kSuccess) {
      (void)get_last_error();
      return;
    }
    DeviceInfo &info = g_devices[id];
    info.sm_count = prop.multiProcessorCount;
    info.warp_size = prop.warpSize;
    info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    info.max_smem_per_block = max_smem_per_block(prop);
    info.cooperative_launch = prop.cooperativeLaunch != 0;
    info.l2_bytes = prop.l2CacheSize;
#if XVK_GPU_HIP
    std::snprintf(info.arch, sizeof info.arch, "%.*s", int(std::strcspn(prop.gcnArchName, ":")), prop.gcnArchName);
#else
    std::snprintf(info.arch, sizeof info.arch, "sm_%d%d", prop.major, prop.minor);
    info.dependent_launch = prop.major >= 9 && runs_sm90_code(id);
    info.clusters = info.dependent_launch;  // the same condition: sm_90 code on an sm_90 (or later) device
    // (Code built for older architectures copies at once: correct, not overlapped.)
    info.async_copies = prop.major >= 8;
#endif
    int clock_khz = 0, bus_bits = 0;
    if (get_memory_clock_khz(&clock_khz, id) != kSuccess || get_memory_bus_bits(&bus_bits, id) != kSuccess) {
      (void)get_last_error();
      clock_khz = bus_bits = 0;
    }
    info.memory_gbps = peak_memory_gbps(clock_khz, bus_bits);
    info.table = &tuning_table_for(info.arch, info.memory_gbps);
    info.table_index = TuningIndex(*info.table);
  });
  return g_devices[id];
}

int env_switch(const char *name) {
  const char *e = std::getenv(name);
  return e && e[0] == '1' ? 1 : e && e[0] == '0' ? 0 : -1;
}

bool l2_row_ahead(const Context &ctx, int64_t blocks, int64_t row_bytes) {
  // On the H200 (60 MiB L2), block kernels of 1024 or 512 threads, same run:
  // 16-bit rows of 16384 and 32768 columns (2 x 17 MB) 4-7% faster
  // (LayerNorm, softmax; RMSNorm 1-2%); forced on, fp32 rows of 32768
  // (2 x 35 MB) 39% slower, the requests evicting the rows in use.
  if (!kL2Prefetch || row_bytes <= 0) return false;
  static const int forced = env_switch("XVK_L2_ROW_AHEAD");
  if (forced >= 0) return forced != 0;
  return 5 * blocks * row_bytes <= ctx.info->l2_bytes;  // 2 rows per block in 40% of L2
}

error_t Context::workspace(size_t bytes, void **out) {
  if (bytes > scratch_bytes) {
    if (scratch) (void)free_device(scratch);  // waits for the work that used it
    scratch = nullptr;
    scratch_bytes = 0;
    const error_t e = malloc_device(&scratch, bytes);
    if (e != kSuccess) return e;
    scratch_bytes = bytes;
  }
  *out = scratch;
  return kSuccess;
}

void report_error(const char *message) { report(message); }

error_t Context::completion_counters(int count, unsigned **out) {
  if (count > counter_count) {
    if (counters) (void)free_device(counters);  // waits for the work that used them
    counters = nullptr;
    counter_count = 0;
    const int n = count < 64 ? 64 : count;
    void *p = nullptr;
    error_t e = malloc_device(&p, size_t(n) * sizeof(unsigned));
    if (e != kSuccess) return e;
    e = memset_async(p, 0, size_t(n) * sizeof(unsigned), stream);  // ordered before the kernels that use them
    if (e != kSuccess) {
      (void)free_device(p);
      return e;
    }
    counters = static_cast<unsigned *>(p);
    counter_count = n;
  }
  *out = counters;
  return kSuccess;
}

xvk_status_t device_error(const char *what, error_t e) {
  char message[256];
  std::snprintf(message, sizeof message, "%s failed: %s error %d (%s)", what, kRuntimeName, int(e), error_string(e));
  report(message);
  return e == error_t(2) /* cudaErrorMemoryAllocation == hipErrorOutOfMemory == 2 */ ? XVK_ERROR_OUT_OF_MEMORY
                                                                                   : XVK_ERROR_DEVICE;
}

xvk_status_t check_launch(const char *kernel_name) {
  const error_t e = get_last_error();
  return e == kSuccess ? XVK_SUCCESS : device_error(kernel_name, e);
}

}  // namespace xvk::gpu

// The module's only export: the loader calls it once.
extern "C" __attribute__((visibility("default"))) const xvk_backend_ops *xvk_backend_entry(
    uint32_t interface_version, const xvk_host_api *host) {
  if (interface_version != XVK_BACKEND_INTERFACE_VERSION || !host) return nullptr;
  xvk::gpu::g_host = host;
  return &xvk::gpu::g_ops;
}
