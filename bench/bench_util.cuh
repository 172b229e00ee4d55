// Timing and data helpers shared by xvk-bench and xvk-tune: every timed
// launch runs alone, after the L2 has been flushed, between two device events.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "xvk/xvk.h"

namespace bench {

#define CUDA_OK(call)                                                                            \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)
#define XVK_OK(call)                                                                                    \
  do {                                                                                                  \
    xvk_status_t s_ = (call);                                                                           \
    if (s_ != XVK_SUCCESS) {                                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, xvk_last_error_message());      \
      std::exit(2);                                                                                     \
    }                                                                                                   \
  } while (0)

// Our copy kernel: 16-byte loads and stores, four in flight per thread,
// launched with a block per 4 * 256 vectors (one trip through the loop).
// That grid copies 3-6% faster on the H200 than a persistent one of 8
// blocks per SM looping over the data, whose last trip leaves SMs idle.
// The four accesses are predicated, so that every thread makes that one trip
// also when n is not a multiple of the grid: a scalar loop for the remainder
// (this kernel until 2026-11-28) had the last blocks' threads make three
// round trips, 0.8-1.1 us on sizes a little over a whole 16 KiB (H200,
// bench/results/h200-2026-11-28-copy-sizes.txt), which made the ceiling of
// the norms' cases (x, y and a few hundred bytes of gamma and statistics)
// that much more lenient than that of softmax on the same rows.
__global__ void __launch_bounds__(256) copy_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n) dst[i + u * stride] = v[u];
  }
}

// Deterministic pseudo-random fill (never zeros), in place on the device.
template <class T>
__global__ void fill_kernel(T *p, size_t n, uint32_t seed, float mean, float sd) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    const float u = (h & 0xffffff) / 16777216.0f;  // [0, 1)
    p[i] = T(mean + sd * 3.4641f * (u - 0.5f));     // uniform with standard deviation sd
  }
}

// The benchmarks' device memory: one allocation of nearly all free memory,
// taken at the first Buffer and handed out as a stack, so that no buffer goes
// back to the driver between timed launches. After cudaFree of large
// allocations every kernel on the device runs about 14% slower for some 50 ms
// (H100, bench/experiments/timing_setup.cu: with 4 x 6.4 GB just freed, softmax
// forward fp32 8192 x 1024 31.2 us against 27.5, the copy kernel 30.4 against
// 26.7, SM clock unchanged), which fell on whichever case came next.
// The arena's size; 0: all free memory but kHeadroom. Set before the first
// Buffer, or by XVK_BENCH_ARENA_MIB in the environment: under ncu, whose
// kernel replay saves and restores every device allocation, an arena of all
// memory made each profiled launch fail (H200, 2026-11-28: "Failed to
// profile", exit 9, about a minute per launch); the profiling stages of
// bench/run_on_gpu.sh set it.
inline size_t g_arena_bytes = 0;
class Arena {
 public:
  static Arena &get() {
    static Arena arena;
    return arena;
  }
  void *take(size_t bytes) {
    const size_t size = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    if (size > capacity_ - top_) {
      std::fprintf(stderr, "bench arena: %zu bytes wanted, %zu of %zu free\n", bytes, capacity_ - top_, capacity_);
      std::exit(2);
    }
    blocks_.push_back({top_, false});
    void *p = base_ + top_;
    top_ += size;
    return p;
  }
  // Frees may come in any order: the stack falls back past every freed block on its top.
  void give(void *p) {
    const size_t offset = size_t(static_cast<char *>(p) - base_);
    for (Block &b : blocks_)
      if (b.offset == offset) b.released = true;
    while (!blocks_.empty() && blocks_.back().released) {
      top_ = blocks_.back().offset;
      blocks_.pop_back();
    }
  }

 private:
  static constexpr size_t kAlign = 256;
  // Left to the library (its workspace and counters) and the driver.
  static constexpr size_t kHeadroom = size_t(4) << 30;
  struct Block {
    size_t offset;
    bool released;
  };
  Arena() {
    size_t free = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free, &total));
    if (const char *mib = std::getenv("XVK_BENCH_ARENA_MIB"); mib && *mib && !g_arena_bytes) {  // set and not empty
      char *end = nullptr;
      const unsigned long long v = std::strtoull(mib, &end, 10);
      if (end == mib || *end != '\0' || v == 0 || v > (size_t(1) << 24)) {
        std::fprintf(stderr, "XVK_BENCH_ARENA_MIB wants a whole number of MiB from 1 to 16777216, got '%s'\n", mib);
        std::exit(2);
      }
      g_arena_bytes = size_t(v) << 20;
    }
    capacity_ = g_arena_bytes ? g_arena_bytes : free > kHeadroom ? (free - kHeadroom) / kAlign * kAlign : 0;
    void *p = nullptr;
    CUDA_OK(cudaMalloc(&p, capacity_));
    base_ = static_cast<char *>(p);
  }
  char *base_ = nullptr;
  size_t capacity_ = 0, top_ = 0;
  std::vector<Block> blocks_;
};

struct Buffer {
  void *p = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t b) : p(Arena::get().take(b)), bytes(b) {}
  ~Buffer() { Arena::get().give(p); }
  Buffer(const Buffer &) = delete;
};

inline int g_reps = 50;

// A launch count given on a command line (`flag` names it in the message):
// a whole number of at least 1, else the program stops. median() of no
// launches would read past an empty vector.
inline int parse_reps(const char *flag, const char *text) {
  char *end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 1000000) {
    std::fprintf(stderr, "%s wants a launch count from 1 to 1000000, got '%s'\n", flag, text);
    std::exit(2);
  }
  return int(v);
}
inline cudaStream_t g_stream = nullptr;
inline Buffer *g_flush = nullptr;  // written before every timed launch: evicts the 50 MB L2
inline cudaEvent_t g_start, g_stop;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time in microseconds of `launch`, each run timed alone after an L2 flush.
// Warm-up: launches for g_warm_up_ms of wall time (at least one), so that
// clocks the GPU lowered while the host filled the case's data are back up
// before timing. With one warm-up launch the first case after a fill ran up
// to 8% slow (H200: 256x512x28x28 NCHW fp16 bn+relu forward 188 us, bf16 in
// the next case 175 us). bench/torch_bench.py warms up the same way. The
// tuner, whose candidates run back to back, takes less.
inline double g_warm_up_ms = 20.0;

// `flush`, when given, runs instead of the memset (bench/experiments/read_bandwidth.cu
// compares a flush that leaves L2 dirty with one that leaves it clean).
inline double time_us(const std::function<void()> &launch, const std::function<void()> &flush = {}) {
  const auto warm_start = std::chrono::steady_clock::now();
  do {
    launch();
    CUDA_OK(cudaStreamSynchronize(g_stream));
  } while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count() <
           g_warm_up_ms);
  std::vector<double> t;
  for (int i = 0; i < g_reps; ++i) {
    if (flush)
      flush();
    else
      CUDA_OK(cudaMemsetAsync(g_flush->p, i & 0xff, g_flush->bytes, g_stream));
    CUDA_OK(cudaEventRecord(g_start, g_stream));
    launch();
    CUDA_OK(cudaEventRecord(g_stop, g_stream));
    CUDA_OK(cudaEventSynchronize(g_stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, g_start, g_stop));
    t.push_back(ms * 1000.0);
  }
  CUDA_OK(cudaGetLastError());
  return median(t);
}

// Sets up the stream, events and flush buffer on device 0.
inline void init() {
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  CUDA_OK(cudaStreamCreate(&g_stream));
  CUDA_OK(cudaEventCreate(&g_start));
  CUDA_OK(cudaEventCreate(&g_stop));
  g_flush = new Buffer(size_t(prop.l2CacheSize) * 4);
}

// Our copy kernel over n 16-byte vectors, with its grid: a block per 4 * 256 vectors.
inline void launch_copy_kernel(const void *src, void *dst, size_t n) {
  const int blocks = int(std::min<size_t>((n + 4 * 256 - 1) / (4 * 256), size_t(1) << 30));
  copy_kernel<<<blocks, 256, 0, g_stream>>>(static_cast<const uint4 *>(src), static_cast<uint4 *>(dst), n);
}

// The copy ceiling of a case that moves `bytes`: half read, half written, timed
// as the cases are (time_us), by cudaMemcpy and by our copy kernel (cached per size).
struct Ceiling {
  double memcpy_us, kernel_us;
  double best() const { return std::min(memcpy_us, kernel_us); }
};
inline Ceiling copy_ceiling(size_t bytes) {
  static std::map<size_t, Ceiling> cache;
  auto it = cache.find(bytes);
  if (it != cache.end()) return it->second;
  const size_t half = (bytes / 2 + 15) / 16 * 16;
  Buffer src(half), dst(half);
  CUDA_OK(cudaMemsetAsync(src.p, 1, half, g_stream));
  Ceiling c;
  c.memcpy_us = time_us([&] { CUDA_OK(cudaMemcpyAsync(dst.p, src.p, half, cudaMemcpyDeviceToDevice, g_stream)); });
  c.kernel_us = time_us([&] { launch_copy_kernel(src.p, dst.p, half / 16); });
  cache[bytes] = c;
  return c;
}

// Fills n elements of dtype id (xvk_dtype_id) with values of the given mean and sd.
inline void fill(void *p, int dtype, size_t n, uint32_t seed, float mean, float sd) {
  if (dtype == 0) fill_kernel<float><<<1024, 256, 0, g_stream>>>(static_cast<float *>(p), n, seed, mean, sd);
  if (dtype == 1) fill_kernel<__half><<<1024, 256, 0, g_stream>>>(static_cast<__half *>(p), n, seed, mean, sd);
  if (dtype == 2) fill_kernel<__nv_bfloat16><<<1024, 256, 0, g_stream>>>(static_cast<__nv_bfloat16 *>(p), n, seed, mean, sd);
  CUDA_OK(cudaGetLastError());
}

}  // namespace bench
