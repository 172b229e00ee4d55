// The one place where NVIDIA and AMD differ. Every kernel in src/cuda is
// written against the names below; compiled by nvcc they map to CUDA, compiled
// by hipcc (the HIP build, src/hip) they map to HIP. Nothing else in src/cuda
// may spell a warp width, a full lane mask, a runtime API call or a vendor
// half-precision type.
#pragma once

#include <stdint.h>

#include <type_traits>

#if defined(__HIPCC__)
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define XVK_GPU_HIP 1
#define XVK_GPU_CUDA 0
#else
#include <cuda_bf16.h>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define XVK_GPU_HIP 0
#define XVK_GPU_CUDA 1
#endif

namespace xvk::gpu {

// ---------------------------------------------------------------------------
// Runtime API
// ---------------------------------------------------------------------------
#if XVK_GPU_HIP
using error_t = hipError_t;
using stream_t = hipStream_t;
using event_t = hipEvent_t;
using device_prop_t = hipDeviceProp_t;
inline constexpr error_t kSuccess = hipSuccess;
inline const char *error_string(error_t e) { return hipGetErrorString(e); }
inline error_t get_device_count(int *n) { return hipGetDeviceCount(n); }
inline error_t set_device(int d) { return hipSetDevice(d); }
inline error_t get_device(int *d) { return hipGetDevice(d); }
inline error_t get_device_properties(device_prop_t *p, int d) { return hipGetDeviceProperties(p, d); }
// The memory clock (kHz) and bus width (bits) device attributes.
inline error_t get_memory_clock_khz(int *v, int d) { return hipDeviceGetAttribute(v, hipDeviceAttributeMemoryClockRate, d); }
inline error_t get_memory_bus_bits(int *v, int d) { return hipDeviceGetAttribute(v, hipDeviceAttributeMemoryBusWidth, d); }
inline error_t malloc_device(void **p, size_t n) { return hipMalloc(p, n); }
inline error_t free_device(void *p) { return hipFree(p); }
inline error_t memcpy_async(void *d, const void *s, size_t n, stream_t st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyDefault, st);
}
inline error_t memset_async(void *d, int v, size_t n, stream_t st) { return hipMemsetAsync(d, v, n, st); }
inline error_t stream_synchronize(stream_t s) { return hipStreamSynchronize(s); }
inline error_t get_last_error() { return hipGetLastError(); }
inline error_t event_create(event_t *e) { return hipEventCreate(e); }
inline error_t event_destroy(event_t e) { return hipEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return hipEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return hipEventSynchronize(e); }
inline error_t event_elapsed_ms(float *ms, event_t a, event_t b) { return hipEventElapsedTime(ms, a, b); }
template <class Kernel>
inline error_t occupancy_blocks_per_sm(int *blocks, Kernel kernel, int threads, size_t smem) {
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, smem);
}
template <class Kernel>
inline error_t set_max_dynamic_smem(Kernel kernel, int bytes) {
  return hipFuncSetAttribute(reinterpret_cast<const void *>(kernel), hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
// A launch whose blocks are all resident at once, so they may wait for each other.
template <class Kernel>
inline error_t launch_cooperative(Kernel kernel, unsigned blocks, unsigned threads, void **args, size_t smem,
                                  stream_t s) {
  return hipLaunchCooperativeKernel(reinterpret_cast<const void *>(kernel), dim3(blocks), dim3(threads), args,
                                    unsigned(smem), s);
}
// A plain launch by handle (see the CUDA form): HIP's handle is the kernel's
// own address.
struct KernelHandle {
  const void *kernel;
};
inline error_t find_kernel_handle(KernelHandle *handle, const void *kernel) {
  handle->kernel = kernel;
  return hipSuccess;
}
// `overlap` (programmatic dependent launch, see the CUDA form): HIP has none.
inline error_t launch_by_handle(const KernelHandle &handle, dim3 grid, dim3 block, size_t smem, stream_t s,
                                void **params, bool /*overlap*/) {
  return hipLaunchKernel(handle.kernel, grid, block, params, smem, s);
}
// Thread block clusters (kClusterLaunch): none on AMD. Never called there:
// DeviceInfo::clusters is false, so no configuration asks for them.
inline constexpr bool kClusterLaunch = false;
template <class... Params, class... Args>
inline error_t launch_clustered(void (*)(Params...), unsigned, unsigned, unsigned, size_t, stream_t, Args...) {
  return hipErrorNotSupported;
}
template <class... Params>
inline error_t occupancy_clusters(int *clusters, void (*)(Params...), int, int, size_t) {
  *clusters = 0;
  return hipErrorNotSupported;
}
inline int max_smem_per_block(const device_prop_t &p) { return int(p.sharedMemPerBlock); }
inline constexpr const char *kRuntimeName = "HIP";
inline constexpr const char *kBackendName = "hip";  // also the prefix of the runtime API
#else
using error_t = cudaError_t;
using stream_t = cudaStream_t;
using event_t = cudaEvent_t;
using device_prop_t = cudaDeviceProp;
inline constexpr error_t kSuccess = cudaSuccess;
inline const char *error_string(error_t e) { return cudaGetErrorString(e); }
inline error_t get_device_count(int *n) { return cudaGetDeviceCount(n); }
inline error_t set_device(int d) { return cudaSetDevice(d); }
inline error_t get_device(int *d) { return cudaGetDevice(d); }
inline error_t get_device_properties(device_prop_t *p, int d) { return cudaGetDeviceProperties(p, d); }
// The memory clock (kHz) and bus width (bits) device attributes (no longer
// fields of cudaDeviceProp in CUDA 13).
inline error_t get_memory_clock_khz(int *v, int d) { return cudaDeviceGetAttribute(v, cudaDevAttrMemoryClockRate, d); }
inline error_t get_memory_bus_bits(int *v, int d) { return cudaDeviceGetAttribute(v, cudaDevAttrGlobalMemoryBusWidth, d); }
inline error_t malloc_device(void **p, size_t n) { return cudaMalloc(p, n); }
inline error_t free_device(void *p) { return cudaFree(p); }
inline error_t memcpy_async(void *d, const void *s, size_t n, stream_t st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyDefault, st);
}
inline error_t memset_async(void *d, int v, size_t n, stream_t st) { return cudaMemsetAsync(d, v, n, st); }
inline error_t stream_synchronize(stream_t s) { return cudaStreamSynchronize(s); }
inline error_t get_last_error() { return cudaGetLastError(); }
inline error_t event_create(event_t *e) { return cudaEventCreate(e); }
inline error_t event_destroy(event_t e) { return cudaEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return cudaEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return cudaEventSynchronize(e); }
inline error_t event_elapsed_ms(float *ms, event_t a, event_t b) { return cudaEventElapsedTime(ms, a, b); }
template <class Kernel>
inline error_t occupancy_blocks_per_sm(int *blocks, Kernel kernel, int threads, size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, smem);
}
template <class Kernel>
inline error_t set_max_dynamic_smem(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
// A launch whose blocks are all resident at once, so they may wait for each other.
template <class Kernel>
inline error_t launch_cooperative(Kernel kernel, unsigned blocks, unsigned threads, void **args, size_t smem,
                                  stream_t s) {
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void *>(kernel), dim3(blocks), dim3(threads), args, smem,
                                     s);
}
// A launch by handle: the driver's function for the kernel on the current
// device, looked up once (find_kernel_handle) and launched through the
// driver's cuLaunchKernelEx, which the runtime hands out. <<<>>> and the
// runtime's launch calls look the function up again on every call.
// `overlap` (sm_90 and later) launches it as a programmatic dependent launch:
// its blocks may be scheduled as soon as the stream's previous kernel's
// blocks have all ended (or let it, allow_next_kernel) instead of after that
// kernel's grid completes, and the kernel must call wait_for_prior_kernel()
// before it reads or writes memory that kernel may touch. Both cut the host's
// cost: per launch of an empty kernel on the H200 machine's host, <<<>>>
// 4.41-6.00 us, cuLaunchKernel 4.02-5.57, cuLaunchKernelEx with the attribute
// 3.34-4.58 (bench/results/h200-2026-11-29-launch-by-handle.txt). A null
// handle (lookup failed), no driver entry point, or a refused launch goes
// through cudaLaunchKernelExC instead, which reports a failure in the
// runtime's own terms.
struct KernelHandle {
  CUfunction function;
  const void *kernel;  // the host stub, for the runtime's launch
};
inline error_t find_kernel_handle(KernelHandle *handle, const void *kernel) {
  handle->kernel = kernel;
  handle->function = nullptr;
  cudaFunction_t f = nullptr;
  const error_t e = cudaGetFuncBySymbol(&f, kernel);
  if (e == cudaSuccess) handle->function = f;
  return e;
}
using driver_launch_t = CUresult(CUDAAPI *)(const CUlaunchConfig *, CUfunction, void **, void **);
inline driver_launch_t driver_launch_kernel() {
  static const driver_launch_t fn = [] {
    void *entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      entry = nullptr;
    }
    return reinterpret_cast<driver_launch_t>(entry);
  }();
  return fn;
}
inline error_t launch_by_handle(const KernelHandle &handle, dim3 grid, dim3 block, size_t smem, stream_t s,
                                void **params, bool overlap) {
  if (handle.function)
    if (const driver_launch_t launch = driver_launch_kernel()) {
      CUlaunchAttribute attribute{};
      attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attribute.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig config{};
      config.gridDimX = grid.x, config.gridDimY = grid.y, config.gridDimZ = grid.z;
      config.blockDimX = block.x, config.blockDimY = block.y, config.blockDimZ = block.z;
      config.sharedMemBytes = unsigned(smem);
      config.hStream = s;
      config.attrs = &attribute;
      config.numAttrs = overlap ? 1 : 0;
      if (launch(&config, handle.function, params, nullptr) == CUDA_SUCCESS) return cudaSuccess;
    }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = s;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelExC(&config, handle.kernel, params);
}
// The PTX version (e.g. 90) a kernel's code on the current device was built
// from, or 0 if unknown.
template <class Kernel>
inline int kernel_ptx_version(Kernel kernel) {
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.ptxVersion;
}
// Thread block clusters (sm_90 and later): `cluster` consecutive blocks of a
// one-dimensional grid run at once on one GPC and may read and write each
// other's shared memory (store_to_cluster_block) and wait for each other
// (cluster_arrive, cluster_wait). kClusterLaunch says whether the backend can
// launch them at all; DeviceInfo::clusters whether the device can.
inline constexpr bool kClusterLaunch = true;
inline cudaLaunchConfig_t cluster_launch_config(unsigned blocks, unsigned threads, unsigned cluster, size_t smem,
                                                stream_t s, cudaLaunchAttribute *attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = s;
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = cluster;
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}
template <class... Params, class... Args>
inline error_t launch_clustered(void (*kernel)(Params...), unsigned blocks, unsigned threads, unsigned cluster,
                                size_t smem, stream_t s, Args... args) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = cluster_launch_config(blocks, threads, cluster, smem, s, &attribute);
  return cudaLaunchKernelEx(&config, kernel, Params(args)...);
}
// How many clusters of `cluster` blocks of the kernel can be resident on the
// device at once.
template <class... Params>
inline error_t occupancy_clusters(int *clusters, void (*kernel)(Params...), int threads, int cluster, size_t smem) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = cluster_launch_config(unsigned(cluster), unsigned(threads), unsigned(cluster), smem,
                                                          nullptr, &attribute);
  return cudaOccupancyMaxActiveClusters(clusters, kernel, &config);
}
inline int max_smem_per_block(const device_prop_t &p) { return int(p.sharedMemPerBlockOptin); }
inline constexpr const char *kRuntimeName = "CUDA";
inline constexpr const char *kBackendName = "cuda";  // also the prefix of the runtime API
#endif

// ---------------------------------------------------------------------------
// Warps (wavefronts)
// ---------------------------------------------------------------------------
// kMaxWarpSize bounds shared-memory arrays sized per warp on the host side;
// the device's real width comes from its properties at run time
// (DeviceInfo::warp_size) and, in device code, from kWarpSize.
inline constexpr int kMaxWarpSize = 64;
inline constexpr int kMinWarpSize = 32;

#if XVK_GPU_HIP
// hipcc compiles each --offload-arch in its own device pass, where clang sets
// __AMDGCN_WAVEFRONT_SIZE for that target (64 on gfx908/gfx90a/gfx940, 32 on
// gfx1030). clang also defines it, as 64, in the host pass, where it means
// nothing: host code reads the width from DeviceInfo::warp_size instead.
#if defined(__HIP_DEVICE_COMPILE__)
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
inline constexpr int kWarpSize = kMaxWarpSize;  // host pass: parses device code, never runs it
#endif
using lane_mask_t = uint64_t;  // AMD ballots are 64 bits wide whatever the wave size
#else
inline constexpr int kWarpSize = 32;
using lane_mask_t = uint32_t;
#endif
static_assert(kWarpSize >= kMinWarpSize && kWarpSize <= kMaxWarpSize && (kWarpSize & (kWarpSize - 1)) == 0,
              "a warp is 32 or 64 lanes");
static_assert(sizeof(lane_mask_t) * 8 >= kWarpSize, "a ballot holds one bit per lane");
inline constexpr lane_mask_t kAllLanes = ~lane_mask_t(0);

// Butterfly exchange within groups of `width` lanes (a power of two <= kWarpSize).
__device__ __forceinline__ float shfl_xor(float v, int lane_mask, int width) {
#if XVK_GPU_HIP
  return __shfl_xor(v, lane_mask, width);
#else
  return __shfl_xor_sync(kAllLanes, v, lane_mask, width);
#endif
}

// Lane src_lane's v, within groups of `width` lanes (a power of two <= kWarpSize).
__device__ __forceinline__ float shfl_from(float v, int src_lane, int width) {
#if XVK_GPU_HIP
  return __shfl(v, src_lane, width);
#else
  return __shfl_sync(kAllLanes, v, src_lane, width);
#endif
}

// The same for 32-bit words (bitmask pieces).
__device__ __forceinline__ uint32_t shfl_xor_u32(uint32_t v, int lane_mask, int width) {
#if XVK_GPU_HIP
  return uint32_t(__shfl_xor(int(v), lane_mask, width));
#else
  return __shfl_xor_sync(kAllLanes, v, lane_mask, width);
#endif
}

// One bit per lane of the whole warp: bit i is lane i's predicate.
__device__ __forceinline__ lane_mask_t ballot(bool predicate) {
#if XVK_GPU_HIP
  return __ballot(predicate);
#else
  return __ballot_sync(kAllLanes, predicate);
#endif
}

// Reads a T of 2, 4, 8 or 16 bytes (a Pack) from global memory. On AMD the
// pointer is cast to the global address space: where LLVM cannot prove that a
// generic pointer points to global memory it emits flat_load_*, which also
// counts against the LDS counter, so waiting for a shuffle's result
// (ds_bpermute) also waits for those loads. ROCm 5.2's clang did so for
// softmax's LogitsRow, whose row pointer is null past the last row. Every
// tensor a kernel reads lives in global memory. On NVIDIA this is the plain
// load it always was.
#if XVK_GPU_HIP
template <int BYTES> struct GlobalWord;
template <> struct GlobalWord<2> { using type = uint16_t; };
template <> struct GlobalWord<4> { using type = uint32_t; };
template <> struct GlobalWord<8> { typedef uint32_t type __attribute__((ext_vector_type(2))); };
template <> struct GlobalWord<16> { typedef uint32_t type __attribute__((ext_vector_type(4))); };
template <class T>
__device__ __forceinline__ T load_global(const T *p) {
  using Word = typename GlobalWord<sizeof(T)>::type;
  const Word word = *(const __attribute__((address_space(1))) Word *)(p);
  T value;
  __builtin_memcpy(&value, &word, sizeof(T));
  return value;
}
#else
template <class T>
__device__ __forceinline__ T load_global(const T *p) { return *p; }
#endif

// A load of data the kernel reads for the last time (BatchNorm's pass 2):
// on NVIDIA the cache-streaming form, ld.global.cs, which marks the line
// evict-first in L1 and L2, so the lines still to be read stay longer. On
// HIP the plain load (not measured on AMD), so kernels that choose between
// the two need only one instance there (kHasLastUseLoads).
inline constexpr bool kHasLastUseLoads = !XVK_GPU_HIP;
#if !XVK_GPU_HIP
template <int BYTES> struct LastUseWord;
template <> struct LastUseWord<4> { using type = unsigned int; };
template <> struct LastUseWord<8> { using type = uint2; };
template <> struct LastUseWord<16> { using type = uint4; };
#endif
template <class T>
__device__ __forceinline__ T load_global_last(const T *p) {
#if XVK_GPU_HIP
  return load_global(p);
#else
  using Word = typename LastUseWord<sizeof(T)>::type;
  const Word word = __ldcs(reinterpret_cast<const Word *>(p));
  T value;
  __builtin_memcpy(&value, &word, sizeof(T));
  return value;
#endif
}

// A store of data the kernel does not read again, where it still reads
// other data from L2 (BatchNorm's held single pass writes y while it reads
// the rest of x a second time): on NVIDIA the cache-streaming form,
// st.global.cs, evict-first in L2, so those lines stay longer. On HIP the
// plain store (not measured on AMD). 4, 8 or 16 bytes.
template <class T>
__device__ __forceinline__ void store_global_streaming(T *p, const T &value) {
#if XVK_GPU_HIP
  *p = value;
#else
  using Word = typename LastUseWord<sizeof(T)>::type;
  Word word;
  __builtin_memcpy(&word, &value, sizeof(T));
  __stcs(reinterpret_cast<Word *>(p), word);
#endif
}

// A volatile load from global memory, for values other blocks store while
// this one waits (a grid barrier's counter, the partials read after it). On
// HIP through the global address space, as load_global: through a volatile
// generic pointer ROCm 5.2 made flat_load_dword ... glc (batch_norm.cu's
// single pass). On NVIDIA, nvcc infers the space: ld.volatile.global.
template <class T>
__device__ __forceinline__ T load_volatile_global(const T *p) {
#if XVK_GPU_HIP
  return *(const volatile __attribute__((address_space(1))) T *)(p);
#else
  return *static_cast<const volatile T *>(p);
#endif
}

// Four floats that other blocks stored before a grid barrier, in one load
// past L1 (NVIDIA: ld.global.cg, so never a stale L1 line; HIP: four
// volatile loads, as load_volatile_global).
__device__ __forceinline__ float4 load_coherent_float4(const float *p) {
#if XVK_GPU_HIP
  return make_float4(load_volatile_global(p), load_volatile_global(p + 1), load_volatile_global(p + 2),
                     load_volatile_global(p + 3));
#else
  return __ldcg(reinterpret_cast<const float4 *>(p));
#endif
}

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) & (kWarpSize - 1); }
__device__ __forceinline__ int warp_id() { return int(threadIdx.x) / kWarpSize; }

// ---------------------------------------------------------------------------
// Half-precision types and conversions
// ---------------------------------------------------------------------------
#if XVK_GPU_HIP
using half = __half;
using bfloat16 = hip_bfloat16;
__device__ __forceinline__ float to_float(bfloat16 v) { return float(v); }
template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ bfloat16 from_float<bfloat16>(float v) { return bfloat16(v); }
#else
using half = __half;
using bfloat16 = __nv_bfloat16;
__device__ __forceinline__ float to_float(bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ bfloat16 from_float<bfloat16>(float v) { return __float2bfloat16_rn(v); }
#endif
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(half v) { return __half2float(v); }
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ half from_float<half>(float v) { return __float2half_rn(v); }

// The half in the low (high = false) or high 16 bits of a 32-bit word as a
// float, read from the word's register (NVIDIA: one HADD2.F32 with a half
// selector), so a loaded vector stays in its 32-bit registers.
__device__ __forceinline__ float half_in_word_to_float(uint32_t word, bool high) {
#if XVK_GPU_CUDA
  __half2 pair;
  __builtin_memcpy(&pair, &word, sizeof word);
  return high ? __high2float(pair) : __low2float(pair);
#else
  const uint16_t bits = uint16_t(high ? word >> 16 : word);
  half h;
  __builtin_memcpy(&h, &bits, sizeof h);
  return __half2float(h);
#endif
}

// Two floats rounded to nearest into the 32-bit word of two 16-bit values, lo
// in the low half (element 2i of a pack is the low half of word i). One
// instruction per pair on NVIDIA (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32)
// instead of one per element.
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  static_assert(sizeof(T) == 2, "pairs of 16-bit values");
  uint32_t word;
#if XVK_GPU_CUDA
  if constexpr (std::is_same_v<T, half>) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    __builtin_memcpy(&word, &pair, sizeof word);
    return word;
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    __builtin_memcpy(&word, &pair, sizeof word);
    return word;
  }
#else
  const T pair[2] = {from_float<T>(lo), from_float<T>(hi)};
  __builtin_memcpy(&word, pair, sizeof word);
  return word;
#endif
}

// In a kernel launched with `overlap` (launch_by_handle): waits until the
// stream's previous kernel has finished and its writes are visible (returns
// at once otherwise, and on AMD and before sm_90, where launches are plain).
// Every kernel calls it before it touches memory another kernel may use
// (the kernel_waits test checks that each one calls it).
__device__ __forceinline__ void wait_for_prior_kernel() {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// In a kernel that another of ours follows: lets that kernel's
// blocks launch now rather than when this kernel's blocks end, so its
// prologue (before wait_for_prior_kernel) runs beside this kernel. A no-op
// on AMD and before sm_90.
__device__ __forceinline__ void allow_next_kernel() {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Inside a cluster launched by launch_clustered (NVIDIA sm_90 and later;
// code built for older architectures or for AMD never runs these, and traps
// if it does): which cluster of the grid this block is in, how many there
// are, this block's rank in its cluster and the cluster's size.
#if XVK_GPU_CUDA
#define XVK_CLUSTER_TRAP() __trap()
#else
#define XVK_CLUSTER_TRAP() __builtin_trap()
#endif
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define XVK_CLUSTER_REGISTER(name, reg)                  \
  __device__ __forceinline__ unsigned name() {           \
    unsigned v;                                          \
    asm("mov.u32 %0, %%" reg ";" : "=r"(v));             \
    return v;                                            \
  }
#else
#define XVK_CLUSTER_REGISTER(name, reg) \
  __device__ __forceinline__ unsigned name() { XVK_CLUSTER_TRAP(); return 0; }
#endif
XVK_CLUSTER_REGISTER(cluster_index, "clusterid.x")
XVK_CLUSTER_REGISTER(cluster_count, "nclusterid.x")
XVK_CLUSTER_REGISTER(cluster_block_rank, "cluster_ctarank")
XVK_CLUSTER_REGISTER(cluster_blocks, "cluster_nctarank")
#undef XVK_CLUSTER_REGISTER

// A barrier over every thread of the cluster, in two halves: after
// cluster_arrive, this thread's earlier stores (to any block's shared memory)
// are visible to the threads that return from their cluster_wait; between
// the two the thread may do work that needs no other block's results. All
// threads of the cluster call both, the same number of times.
__device__ __forceinline__ void cluster_arrive() {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  XVK_CLUSTER_TRAP();
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  XVK_CLUSTER_TRAP();
#endif
}

// Transaction barriers (mbarrier) in this block's shared memory, which the
// other blocks of the cluster complete by storing into it. Unlike the
// cluster barrier, whose arrive releases (waits out) every earlier memory
// access of the arriving thread, a store_async_to_cluster_block waits for
// nothing: the rows' loads and dx stores stay in flight.
// Sets up `bar` for one arrival per phase (the expecting thread's); before
// another block stores into it, the cluster must pass a barrier.
__device__ __forceinline__ void transaction_barrier_init(uint64_t *bar) {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned address = unsigned(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(address) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  (void)bar;
  XVK_CLUSTER_TRAP();
#endif
}
// The phase of `bar` now open completes once `bytes` bytes of
// store_async_to_cluster_block have landed (before or after this call).
__device__ __forceinline__ void transaction_barrier_expect(uint64_t *bar, unsigned bytes) {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned address = unsigned(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;" ::"r"(address), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes;
  XVK_CLUSTER_TRAP();
#endif
}
// Waits until the phase of `bar` with this parity (0 for its first phase,
// 1 for its second, ...) has completed; the stores that completed it are
// then visible to the calling thread.
__device__ __forceinline__ void transaction_barrier_wait(uint64_t *bar, unsigned parity) {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned address = unsigned(__cvta_generic_to_shared(bar));
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
#else
  (void)bar, (void)parity;
  XVK_CLUSTER_TRAP();
#endif
}
// Stores v at `local` (a __shared__ address of this kernel) in the shared
// memory of block `rank` of this cluster (the same variable, in that block)
// and counts its 8 bytes towards the open phase
// of that block's `bar` (the same variable there).
__device__ __forceinline__ void store_async_to_cluster_block(float2 *local, uint64_t *bar, unsigned rank, float2 v) {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned address = unsigned(__cvta_generic_to_shared(local)), bar_address = unsigned(__cvta_generic_to_shared(bar));
  unsigned remote, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(bar_address), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(remote),
               "f"(v.x), "f"(v.y), "r"(remote_bar)
               : "memory");
#else
  (void)local, (void)bar, (void)rank, (void)v;
  XVK_CLUSTER_TRAP();
#endif
}
#undef XVK_CLUSTER_TRAP

// Asks for the 128-byte line at p to be brought into L2 (no register, no
// wait): a load issued later finds it there. NVIDIA only; a no-op elsewhere,
// so kernels leave such requests out where kL2Prefetch is false (their
// address arithmetic changed AMD's register allocation).
inline constexpr bool kL2Prefetch = XVK_GPU_CUDA;
__device__ __forceinline__ void prefetch_l2(const void *p) {
#if XVK_GPU_CUDA
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

// Copies from global to shared memory that do not pass through registers
// (NVIDIA sm_80 and later: cp.async), for kernels that keep loads in flight
// while they work on data already landed (kRing). A thread starts copies
// (copy_async_16), closes them into a group (async_copies_commit), and later
// waits until at most n of its groups are still in flight
// (async_copies_wait<n>): the copies of the others are then visible to that
// thread, and only to it. kAsyncCopy: the backend has them (DeviceLimits::
// async_copies). Code built for older NVIDIA architectures copies at once.
inline constexpr bool kAsyncCopy = XVK_GPU_CUDA;
__device__ __forceinline__ void copy_async_16(void *shared_dst, const void *global_src) {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = unsigned(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global_src) : "memory");
#else
  *static_cast<uint4 *>(shared_dst) = *static_cast<const uint4 *>(global_src);
#endif
}
__device__ __forceinline__ void async_copies_commit() {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void async_copies_wait() {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
// The same with n known at run time, 0 <= n <= 7 (kMaxRingAhead).
__device__ __forceinline__ void async_copies_wait(int n) {
  switch (n) {
    case 0: async_copies_wait<0>(); break;
    case 1: async_copies_wait<1>(); break;
    case 2: async_copies_wait<2>(); break;
    case 3: async_copies_wait<3>(); break;
    case 4: async_copies_wait<4>(); break;
    case 5: async_copies_wait<5>(); break;
    case 6: async_copies_wait<6>(); break;
    default: async_copies_wait<7>(); break;
  }
}
// The dynamic shared memory the block was launched with, in bytes (where the
// backend has asynchronous copies: the kernels that use them size their
// rings by it; 0 elsewhere).
__device__ __forceinline__ unsigned dynamic_shared_bytes() {
#if XVK_GPU_CUDA
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
#else
  return 0;
#endif
}

// ---------------------------------------------------------------------------
// Arithmetic the vendors spell differently
// ---------------------------------------------------------------------------
// 2^x to a few ulp; results below the smallest normal float flush to 0.
// NVIDIA: one MUFU.EX2 (the non-ftz form adds a scale before and after).
__device__ __forceinline__ float exp2_fast(float x) {
#if XVK_GPU_CUDA
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// The larger of a and b, NaN if either is NaN (fmaxf would drop the NaN and
// hide a NaN row). One instruction on sm_80 and later (max.NaN.f32).
__device__ __forceinline__ float max_nan(float a, float b) {
#if XVK_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a > b || a != a) ? a : b;
#endif
}

}  // namespace xvk::gpu
