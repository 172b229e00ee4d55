// Per-device facts (read once), the per-context state of the GPU backend,
// and the helpers every operator uses to pick and launch a kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "core/backend_api.h"
#include "cuda/common.cuh"
#include "cuda/portability.cuh"
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

// What the kernels' launch decisions depend on, read once per device.
struct DeviceInfo {
  int sm_count = 0;
  int warp_size = kMinWarpSize;  // read from the device: 32, or 64 on AMD CDNA
  int max_threads_per_sm = 2048;
  int max_smem_per_block = 48 * 1024;  // with the opt-in for dynamic shared memory
  bool cooperative_launch = false;
  bool dependent_launch = false;  // launches may overlap the previous kernel (NVIDIA sm_90 and later)
  bool clusters = false;          // launch_clustered works here (NVIDIA sm_90 and later, code built for it)
  bool async_copies = false;      // copy_async_16 runs in the background (NVIDIA sm_80 and later)
  int64_t l2_bytes = 0;
  int memory_gbps = 0;  // peak DRAM bandwidth (peak_memory_gbps), 0 if unknown: chooses among an arch's tables
  char arch[16] = "";  // "sm_90", "gfx90a"
  const TuningTable *table = nullptr;
  TuningIndex table_index;  // table's rows by operator and dtype
  DeviceLimits limits() const { return DeviceLimits{warp_size, max_smem_per_block, clusters, async_copies}; }
};

// Reads (once, thread-safely) and returns the facts of device `id`.
const DeviceInfo &device_info(int id);

struct Context {
  int device = 0;
  stream_t stream = nullptr;
  const DeviceInfo *info = nullptr;
  void *scratch = nullptr;  // grows, never shrinks: no allocation once warmed up
  size_t scratch_bytes = 0;
  // Completion counters of "last block finishes" kernels: zeroed when
  // allocated; each kernel leaves its counters at 0 again when it ends.
  unsigned *counters = nullptr;
  int counter_count = 0;
  // (kernel, threads, dynamic shared bytes) -> blocks per SM, queried once per shape.
  struct KernelShape {
    const void *kernel;
    int threads;
    size_t smem;
    bool operator==(const KernelShape &o) const {
      return kernel == o.kernel && threads == o.threads && smem == o.smem;
    }
  };
  struct KernelShapeHash {
    size_t operator()(const KernelShape &k) const {
      return (std::hash<const void *>()(k.kernel) * 31u + std::hash<int>()(k.threads)) * 31u + std::hash<size_t>()(k.smem);
    }
  };
  std::unordered_map<KernelShape, int, KernelShapeHash> resident_blocks;
  // (kernel, threads, blocks per cluster) -> clusters on the device, likewise.
  std::unordered_map<KernelShape, int, KernelShapeHash> resident_cluster_counts;
  // kernel -> its launch handle on this context's device (found once).
  std::unordered_map<const void *, KernelHandle> kernel_handles;

  // Scratch of at least `bytes` on the device, reused across calls.
  error_t workspace(size_t bytes, void **out);
  // At least `count` of the context's zeroed completion counters (grows,
  // never shrinks).
  error_t completion_counters(int count, unsigned **out);
  // Blocks per SM for a kernel at its launch shape (queried once per shape).
  // A kernel given more dynamic shared memory than the 48 KiB every device
  // grants is first allowed all that a block may have (the attribute
  // persists, so later sizes fit too).
  template <class Kernel>
  int blocks_per_sm(Kernel kernel, int threads, size_t smem) {
    const KernelShape key{reinterpret_cast<const void *>(kernel), threads, smem};
    auto it = resident_blocks.find(key);
    if (it != resident_blocks.end()) return it->second;
    int blocks = 0;
    if (smem + kSharedReserve > 48 * 1024 && set_max_dynamic_smem(kernel, info->max_smem_per_block - kSharedReserve) != kSuccess)
      (void)get_last_error();  // the launch reports it if the size does not fit
    if (occupancy_blocks_per_sm(&blocks, kernel, threads, smem) != kSuccess || blocks < 1) blocks = 1;
    resident_blocks.emplace(key, blocks);
    return blocks;
  }
  // The launch handle of a kernel (looked up once; a failed lookup leaves a
  // handle that launches through the runtime).
  const KernelHandle &handle(const void *kernel) {
    auto it = kernel_handles.find(kernel);
    if (it != kernel_handles.end()) return it->second;
    KernelHandle h;
    if (find_kernel_handle(&h, kernel) != kSuccess) (void)get_last_error();
    return kernel_handles.emplace(kernel, h).first->second;
  }
  // Clusters of `cluster` blocks (no dynamic shared memory) resident on the
  // device at once, for launch_clustered (queried once per shape; at least 1).
  template <class Kernel>
  int resident_clusters(Kernel kernel, int threads, int cluster) {
    const KernelShape key{reinterpret_cast<const void *>(kernel), threads, size_t(cluster)};
    auto it = resident_cluster_counts.find(key);
    if (it != resident_cluster_counts.end()) return it->second;
    int clusters = 0;
    if constexpr (kClusterLaunch) {
      if (occupancy_clusters(&clusters, kernel, threads, cluster, 0) != kSuccess) (void)get_last_error();
    }
    if (clusters < 1) clusters = 1;
    resident_cluster_counts.emplace(key, clusters);
    return clusters;
  }
};

// Records a failure's detail for this thread (the core prefixes the entry point).
void report_error(const char *message);

// Reports a runtime failure through the host and returns XVK_ERROR_DEVICE.
xvk_status_t device_error(const char *what, error_t e);

// Checks the launch that just happened.
xvk_status_t check_launch(const char *kernel_name);

// Widest vector (elements) that every pointer and row stride of a call
// allows: `vec` if each address is a multiple of vec * elem_size bytes (and
// cols a multiple of vec), else 1.
inline bool aligned_to(const void *p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % uint64_t(bytes) == 0; }
inline bool rows_aligned(const xvk_rows_view &v, int64_t bytes, int64_t elem_size) {
  return !v.data || (aligned_to(v.data, bytes) && (v.row_stride * elem_size) % bytes == 0);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t element_size(int dtype) { return dtype == XVK_DTYPE_F32 ? 4 : 2; }

// The configuration of one call: the tuner's forced one, or the device
// table's choice for the call's operator, shape and the vector width it allows.
template <class Args>
Config config_for(const Context &ctx, const Config *forced, OpKind op, Flavour flavour, const Args &a, int vec) {
  return forced ? *forced
                : choose_config(*ctx.info->table, ctx.info->table_index, op, flavour, a.dtype, a.rows, a.cols, vec,
                                ctx.info->limits());
}

// Runs launch(T{}, IntConst<VEC>{}) for the call's storage type and the
// config's vector width (the widest, or 1), returning its status.
template <class F>
xvk_status_t launch_typed(int dtype, int vec, F &&launch) {
  xvk_status_t status = XVK_ERROR_INTERNAL;
  with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_vec<T>(vec, [&](auto v) { status = launch(tag, v); });
  });
  return status;
}

// Grid for a grid-stride kernel: enough blocks to cover the work, at most as
// many as fit on the device at once (or as the config's cap allows), unless
// cap_per_sm is kGridCoversRows: then all of them, up to 2^20 blocks (the
// kernels loop over what is left; HIP allows fewer than 2^32 threads along x).
inline int grid_blocks(const Context &ctx, int64_t work_blocks, int resident_per_sm, int cap_per_sm = 0) {
  constexpr int64_t kMaxCoveringBlocks = int64_t(1) << 20;
  if (cap_per_sm == kGridCoversRows)
    return int(work_blocks < 1 ? 1 : work_blocks < kMaxCoveringBlocks ? work_blocks : kMaxCoveringBlocks);
  if (cap_per_sm > 0 && cap_per_sm < resident_per_sm) resident_per_sm = cap_per_sm;
  const int64_t resident = int64_t(ctx.info->sm_count) * resident_per_sm;
  return int(work_blocks < resident ? (work_blocks < 1 ? 1 : work_blocks) : resident);
}

// launch_kernel's second half: the launch, given the parameters' values
// (already of the kernel's types) to take the addresses of.
template <class... Params>
xvk_status_t launch_with_values(Context &ctx, const char *name, const void *kernel, dim3 grid, dim3 block,
                                size_t smem, Params &&...values) {
  void *params[] = {static_cast<void *>(&values)..., nullptr};
  const error_t e =
      launch_by_handle(ctx.handle(kernel), grid, block, smem, ctx.stream, params, ctx.info->dependent_launch);
  if (e == kSuccess) return XVK_SUCCESS;
  (void)get_last_error();  // the runtime's record of the failure: reported here instead
  return device_error(name, e);
}
// Launches kernel(args...) on the context's stream by the kernel's handle
// (portability.cuh: launch_by_handle), each argument converted to its
// parameter's type as <<<>>> would, and reports a failure under `name`.
// Where the device allows, the launch may overlap the stream's previous
// kernel (programmatic dependent launch), so the kernel must call
// wait_for_prior_kernel() before it touches memory. Every launch in the
// backend but the cluster and cooperative ones goes through here.
template <class... Params, class... Args>
xvk_status_t launch_kernel(Context &ctx, const char *name, void (*kernel)(Params...), dim3 grid, dim3 block,
                           size_t smem, const Args &...args) {
  return launch_with_values(ctx, name, reinterpret_cast<const void *>(kernel), grid, block, smem, Params(args)...);
}

// Launches a persistent grid-stride kernel over `rows` rows, rows_per_block
// at a time, with Config c's threads and resident-block cap, and `smem`
// bytes of dynamic shared memory per block.
template <class... Params, class... Args>
xvk_status_t launch_rows_smem(Context &ctx, const Config &c, void (*kernel)(Params...), const char *name, int64_t rows,
                              int64_t rows_per_block, size_t smem, const Args &...args) {
  const int resident = ctx.blocks_per_sm(kernel, c.threads, smem);
  const int blocks = grid_blocks(ctx, ceil_div(rows, rows_per_block), resident, c.blocks_per_sm);
  return launch_kernel(ctx, name, kernel, dim3(blocks), dim3(c.threads), smem, args...);
}
template <class... Params, class... Args>
xvk_status_t launch_rows(Context &ctx, const Config &c, void (*kernel)(Params...), const char *name, int64_t rows,
                         int64_t rows_per_block, const Args &...args) {
  return launch_rows_smem(ctx, c, kernel, name, rows, rows_per_block, 0, args...);
}

// kCluster launches (Config c: c.group blocks per cluster, a row per
// cluster at a time). A block's slice of the row: its share of the row's
// vectors, in columns.
inline int cluster_slice_cols(int64_t cols, int vec, int blocks) {
  return int(ceil_div(ceil_div(cols, vec), blocks) * vec);
}
// The grid's clusters: as many as the device holds at once (at most
// c.blocks_per_sm blocks per SM when capped), each walking its share of the
// rows; never more than the rows.
template <class Kernel>
int64_t cluster_grid(Context &ctx, const Config &c, Kernel kernel, int64_t rows) {
  int64_t clusters = ctx.resident_clusters(kernel, c.threads, c.group);
  if (c.blocks_per_sm > 0)
    clusters = std::min<int64_t>(clusters, std::max<int64_t>(1, int64_t(ctx.info->sm_count) * c.blocks_per_sm / c.group));
  return std::max<int64_t>(1, std::min<int64_t>(clusters, rows));
}
template <class... Params, class... Args>
xvk_status_t launch_cluster_rows(Context &ctx, const Config &c, void (*kernel)(Params...), const char *name,
                                 int64_t clusters, const Args &...args) {
  const error_t e = launch_clustered(kernel, unsigned(clusters * c.group), unsigned(c.threads), unsigned(c.group), 0,
                                     ctx.stream, args...);
  return e == kSuccess ? check_launch(name) : device_error(name, e);
}

// Whether a grid of `blocks` blocks, each streaming one row of row_bytes
// (what a row's first read takes) at a time, asks L2 for each block's next
// row while it finishes the current one (kHasL2RowAhead kernels): when two
// rows per block take at most 40% of L2, so the request does not evict the
// rows in use. XVK_L2_ROW_AHEAD=0 or =1 overrides the rule (for the
// benchmark's A/B and the tests).
bool l2_row_ahead(const Context &ctx, int64_t blocks, int64_t row_bytes);

// A switch that overrides a launch rule for benchmarks and tests: 1 when the
// environment variable `name` starts with '1', 0 with '0', else -1 (the rule).
int env_switch(const char *name);

// launch_rows for the block register kernels (a row per block): `ahead`, the
// build that asks L2 for the next row (kHasAhead), when l2_row_ahead says
// so for its grid, else `plain`.
template <bool kHasAhead, class... Params, class... Args>
xvk_status_t launch_block_rows(Context &ctx, const Config &c, void (*plain)(Params...), void (*ahead)(Params...),
                               const char *name, int64_t rows, int64_t row_bytes, const Args &...args) {
  if constexpr (kHasAhead) {
    const int blocks = grid_blocks(ctx, rows, ctx.blocks_per_sm(ahead, c.threads, 0), c.blocks_per_sm);
    if (l2_row_ahead(ctx, blocks, row_bytes)) return launch_kernel(ctx, name, ahead, dim3(blocks), dim3(c.threads), 0, args...);
  }
  return launch_rows(ctx, c, plain, name, rows, 1, args...);
}

// Operators (softmax.cu, norms.cu). `forced` (from the tuner) overrides the
// tuning table; NULL in normal calls.
xvk_status_t softmax_forward(Context &ctx, const xvk_softmax_forward_args &a, const Config *forced);
xvk_status_t softmax_backward(Context &ctx, const xvk_softmax_backward_args &a, const Config *forced);
xvk_status_t norm_forward(Context &ctx, const xvk_norm_forward_args &a, const Config *forced);
xvk_status_t norm_backward(Context &ctx, const xvk_norm_backward_args &a, const Config *forced);
xvk_status_t batch_norm_forward(Context &ctx, const xvk_batch_norm_forward_args &a, const Config *forced);
xvk_status_t batch_norm_backward(Context &ctx, const xvk_batch_norm_backward_args &a, const Config *forced);

// Which vector width a call can use, for the tuner and the tests.
int softmax_forward_vec(const xvk_softmax_forward_args &a);
int norm_forward_vec(const xvk_norm_forward_args &a);

}  // namespace xvk::gpu
