// Where do the softmax forwards of 32768-column rows lose against the copy?
// On the H200 the 16-bit ones take 1.12-1.15x the copy time with their best
// kernel (block.p4.t1024: a block of 1024 threads per SM holds a row in
// registers), and a ring of rows copied ahead into shared memory (kRing) is
// slower still, the more so the further ahead it copies. This times kernels
// that move exactly the softmax forward's bytes (each row read once, written
// once) with one more of its phases each:
//   rows       a persistent grid of 1024-thread blocks takes row after row:
//              each thread loads its PACKS 16-byte vectors of the row (threads
//              apart, as the block kernel), then stores them; `b2`: two blocks
//              per SM, so two rows in flight per SM
//   rows+red   the same with the block kernel's two block-wide reductions
//              (max, then sum) between the loads and the stores, which wait
//              for them
//   ring S     rows through a ring of S row slots in shared memory, copied
//              with cp.async (the next S - 1 rows in flight while a row is
//              stored), each thread copying and reading back its own vectors
//   ring S+red the same with the two reductions
// beside the library's own kernels forced (softmax forward, Config by name)
// and bench's copy kernel on the same bytes. Median of L2-flushed launches
// (bench::time_us). Results: bench/results/h200-2026-12-02-row-phases.txt.
#include <cstdio>
#include <string>

#include "kernel_context.cuh"

using namespace bench;
using namespace xvk::gpu;

namespace {

constexpr int kThreads = 1024;

// The block's max, then its sum, of one float per thread (as the softmax
// kernels reduce twice per row); every thread gets the sum.
__device__ __forceinline__ float two_reductions(float v, float *scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = v;
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) scratch[warp] = m;
  __syncthreads();
  m = scratch[lane];
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();
  float s = v - m;
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  s = scratch[lane];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads();
  return s;
}

// A float of the thread's data, so that the reductions cannot be left out,
// and a change to the data that depends on their result (never made: the
// sum of values v - max is never exactly that), so that the stores wait.
template <int PACKS>
__device__ __forceinline__ void reduce_rows_data(uint4 (&v)[PACKS], float *scratch) {
  float f = 0.0f;
#pragma unroll
  for (int k = 0; k < PACKS; ++k) f += float(v[k].x & 0xffu);
  if (two_reductions(f, scratch) == 1.0e30f) v[0].x ^= 1u;
}

template <int PACKS, bool kReduce>
__global__ void __launch_bounds__(kThreads) rows_kernel(const uint4 *src, uint4 *dst, int64_t rows) {
  __shared__ float scratch[32];
  const int64_t row_vectors = int64_t(kThreads) * PACKS;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const uint4 *x = src + row * row_vectors + threadIdx.x;
    uint4 *y = dst + row * row_vectors + threadIdx.x;
    uint4 v[PACKS];
#pragma unroll
    for (int k = 0; k < PACKS; ++k) v[k] = x[k * kThreads];
    if constexpr (kReduce) reduce_rows_data<PACKS>(v, scratch);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) y[k * kThreads] = v[k];
  }
}

__device__ __forceinline__ void copy_16(uint4 *shared_dst, const uint4 *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(unsigned(__cvta_generic_to_shared(shared_dst))),
               "l"(src)
               : "memory");
}

template <int PACKS>
__device__ __forceinline__ void ring_fill(const uint4 *src, uint4 *slot, int64_t row, int64_t rows) {
  if (row < rows) {
    const uint4 *x = src + row * (int64_t(kThreads) * PACKS) + threadIdx.x;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) copy_16(slot + k * kThreads, x + k * kThreads);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");  // one group per row, empty past the last
}

template <int N>
__device__ __forceinline__ void ring_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Launched with S * kThreads * PACKS * 16 bytes of dynamic shared memory.
template <int PACKS, int S, bool kReduce>
__global__ void __launch_bounds__(kThreads) ring_kernel(const uint4 *src, uint4 *dst, int64_t rows) {
  __shared__ float scratch[32];
  extern __shared__ uint4 ring[];
  uint4 *const mine = ring + threadIdx.x;
  const int64_t row_vectors = int64_t(kThreads) * PACKS;
  for (int s = 0; s < S; ++s) ring_fill<PACKS>(src, mine + s * row_vectors, blockIdx.x + int64_t(s) * gridDim.x, rows);
  int slot = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    ring_wait<S - 1>();
    uint4 v[PACKS];
#pragma unroll
    for (int k = 0; k < PACKS; ++k) v[k] = mine[slot * row_vectors + k * kThreads];
    if constexpr (kReduce) reduce_rows_data<PACKS>(v, scratch);
    uint4 *y = dst + row * row_vectors + threadIdx.x;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) y[k * kThreads] = v[k];
    // After the stores, which used every value this thread read of the slot.
    ring_fill<PACKS>(src, mine + slot * row_vectors, row + int64_t(S) * gridDim.x, rows);
    if (++slot == S) slot = 0;
  }
  ring_wait<0>();
}

int g_sms = 0;

template <int PACKS, bool kReduce>
double time_rows(const Buffer &src, Buffer &dst, int64_t rows, int blocks_per_sm) {
  return time_us([&] {
    rows_kernel<PACKS, kReduce><<<g_sms * blocks_per_sm, kThreads, 0, g_stream>>>(static_cast<const uint4 *>(src.p),
                                                                                 static_cast<uint4 *>(dst.p), rows);
  });
}

template <int PACKS, int S, bool kReduce>
double time_ring(const Buffer &src, Buffer &dst, int64_t rows) {
  const int bytes = S * kThreads * PACKS * 16;
  CUDA_OK(cudaFuncSetAttribute(ring_kernel<PACKS, S, kReduce>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return time_us([&] {
    ring_kernel<PACKS, S, kReduce><<<g_sms, kThreads, bytes, g_stream>>>(static_cast<const uint4 *>(src.p),
                                                                         static_cast<uint4 *>(dst.p), rows);
  });
}

Config config_of(Variant v, int vec, int group, int packs, int threads, int blocks_per_sm) {
  Config c;
  c.variant = v, c.vec = vec, c.group = group, c.packs = packs, c.threads = threads, c.blocks_per_sm = blocks_per_sm;
  return c;
}

void report(const char *what, double us, double copy_us) {
  if (us < 0) return std::printf("  %-34s %10s\n", what, "-"), void();
  std::printf("  %-34s %10.2f %7.3f\n", what, us, us / copy_us);
}

// One dtype's rows of 32768 elements: PACKS vectors per thread of 1024.
template <int PACKS>
void run(Context &ctx, int dtype, const char *name, int64_t rows) {
  constexpr int64_t kCols = 32768;
  const int elem = dtype == 0 ? 4 : 2, vec = 16 / elem;
  if (int64_t(PACKS) * kThreads * vec != kCols) std::fprintf(stderr, "PACKS does not fit the row\n"), std::exit(2);
  const size_t bytes = size_t(rows) * kCols * elem;
  Buffer src(bytes), dst(bytes);
  fill(src.p, dtype, size_t(rows) * kCols, 7, 0.0f, 3.0f);
  const double copy = copy_ceiling(2 * bytes).best();
  std::printf("\n%s, %lld x %lld (%.1f MB each way), us and x the copy time:\n", name, (long long)rows, (long long)kCols,
              bytes / 1e6);
  report("copy (ceiling)", copy, copy);
  report("rows", time_rows<PACKS, false>(src, dst, rows, 1), copy);
  report("rows b2", time_rows<PACKS, false>(src, dst, rows, 2), copy);
  report("rows+red", time_rows<PACKS, true>(src, dst, rows, 1), copy);
  report("rows+red b2", time_rows<PACKS, true>(src, dst, rows, 2), copy);
  if constexpr (PACKS * kThreads * 16 * 2 <= 200 * 1024) {
    report("ring 2", time_ring<PACKS, 2, false>(src, dst, rows), copy);
    report("ring 2+red", time_ring<PACKS, 2, true>(src, dst, rows), copy);
  }
  if constexpr (PACKS * kThreads * 16 * 3 <= 200 * 1024) {
    report("ring 3", time_ring<PACKS, 3, false>(src, dst, rows), copy);
    report("ring 3+red", time_ring<PACKS, 3, true>(src, dst, rows), copy);
  }
  const Config forced[] = {
      config_of(Variant::kBlock, vec, 0, PACKS, kThreads, 0),  config_of(Variant::kShared, vec, 0, 1, 512, kGridCoversRows),
      config_of(Variant::kShared, vec, 0, 1, 1024, 0),         config_of(Variant::kRing, vec, 3, 4, 512, 0),
      config_of(Variant::kRing, vec, 3, 4, 1024, 0),           config_of(Variant::kRing, vec, 2, 4, 1024, 0)};
  for (int log = 0; log < 2; ++log)
    for (const Config &c : forced) {
      const std::string what = std::string(log ? "log-softmax " : "softmax ") + config_name(c);
      Config run = c;
      double us = -1.0;
      if (complete_config(run, OpKind::kSoftmaxForward, dtype, kCols, ctx.info->limits())) {
        xvk_softmax_forward_args a{};
        a.rows = rows, a.cols = kCols, a.dtype = dtype, a.log = log, a.scale = 1.0f;
        a.x = {src.p, kCols}, a.y = {dst.p, kCols};
        us = time_us([&] {
          if (softmax_forward(ctx, a, &run) != XVK_SUCCESS) std::fprintf(stderr, "softmax_forward failed\n"), std::exit(2);
        });
      }
      report(what.c_str(), us, copy);
    }
}

}  // namespace

int main(int argc, char **argv) {
  init();
  g_reps = 30;
  Context ctx;
  init_kernel_context(ctx);
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 49152;
  std::printf("%s, %d SMs; median of %d launches each, L2 flushed before each\n", prop.name, g_sms, g_reps);
  run<4>(ctx, 1, "float16", rows);
  run<8>(ctx, 0, "float32", rows);
  return 0;
}
