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
//   softmax E  (fp16) rows+red doing the block kernel's softmax arithmetic,
//              with its exponentials from MUFU (E = mufu), or a share of them
//              from a polynomial on the FMA pipe (E = poly/2: every other
//              element, poly: all), with each variant's largest relative
//              difference from the MUFU kernel's output: is the exponential
//              phase, bound by MUFU, what the 16-bit kernels lose?
// beside the library's own kernels forced (softmax forward, Config by name)
// and bench's copy kernel on the same bytes. Median of L2-flushed launches
// (bench::time_us). Results: bench/results/h200-2026-12-02-row-phases.txt.
#include <cstdio>
#include <string>

#include "cuda/common.cuh"
#include "kernel_context.cuh"

using namespace bench;
using namespace xvk::gpu;

namespace {

constexpr int kThreads = 1024;

// The block's max of a float per thread, then the sum of each one's
// difference from it: the softmax kernels' two reductions per row
// (block_all_reduce, the library's own); every thread gets the sum.
template <int M>
__device__ __forceinline__ float two_reductions(float v, float (&scratch)[M][kMaxWarpsPerBlock]) {
  float m[1] = {v};
  block_all_reduce(m, MaxOp{}, scratch);
  float s[1] = {v - m[0]};
  block_all_reduce(s, SumOp{}, scratch);
  return s[0];
}

// A float of the thread's data, so that the reductions cannot be left out,
// and a change to the data that depends on their result (never made: the
// sum of values v - max is never exactly that), so that the stores wait.
template <int PACKS, int M>
__device__ __forceinline__ void reduce_rows_data(uint4 (&v)[PACKS], float (&scratch)[M][kMaxWarpsPerBlock]) {
  float f = 0.0f;
#pragma unroll
  for (int k = 0; k < PACKS; ++k) f += float(v[k].x & 0xffu);
  if (two_reductions(f, scratch) == 1.0e30f) v[0].x ^= 1u;
}

// A thread's PACKS vectors of a row, kThreads apart (as the block kernel's).
template <int PACKS>
__device__ __forceinline__ void load_row(const uint4 *src, int64_t row, uint4 (&v)[PACKS]) {
  const uint4 *x = src + row * (int64_t(kThreads) * PACKS) + threadIdx.x;
#pragma unroll
  for (int k = 0; k < PACKS; ++k) v[k] = x[k * kThreads];
}
template <int PACKS>
__device__ __forceinline__ void store_row(uint4 *dst, int64_t row, const uint4 (&v)[PACKS]) {
  uint4 *y = dst + row * (int64_t(kThreads) * PACKS) + threadIdx.x;
#pragma unroll
  for (int k = 0; k < PACKS; ++k) y[k * kThreads] = v[k];
}

template <int PACKS, bool kReduce>
__global__ void __launch_bounds__(kThreads) rows_kernel(const uint4 *src, uint4 *dst, int64_t rows) {
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    uint4 v[PACKS];
    load_row<PACKS>(src, row, v);
    if constexpr (kReduce) reduce_rows_data<PACKS>(v, scratch);
    store_row<PACKS>(dst, row, v);
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
  __shared__ float scratch[1][kMaxWarpsPerBlock];
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
    store_row<PACKS>(dst, row, v);
    // After the stores, which used every value this thread read of the slot.
    ring_fill<PACKS>(src, mine + slot * row_vectors, row + int64_t(S) * gridDim.x, rows);
    if (++slot == S) slot = 0;
  }
  ring_wait<0>();
}

// 2^x for x <= 0 on the FMA pipe: x = n + f with n an integer (rounded
// through the float's mantissa) and |f| <= 1/2, 2^f by its Taylor
// polynomial of degree 4 (relative error below 5e-5: enough for 16-bit
// outputs), n added to the exponent as an integer. Below -125 it gives
// 2^-125 instead of 0 or a denormal, and NaN is not kept: an experiment's,
// for finite logits.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -125.0f);
  const float r = x + 12582912.0f;  // 1.5 * 2^23: the mantissa's low bits hold round(x)
  const float f = x - (r - 12582912.0f);
  float p = 9.6181291e-3f;
  p = fmaf(p, f, 5.5504109e-2f);
  p = fmaf(p, f, 2.4022651e-1f);
  p = fmaf(p, f, 6.9314718e-1f);
  p = fmaf(p, f, 1.0f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
}

// The block kernel's softmax of fp16 rows (scale 1, no mask): max, the
// exponentials kept, sum, y = e / sum. kPoly: 0 all from MUFU, 1 every
// other element from exp2_poly, 2 all from it.
template <int PACKS, int kPoly>
__global__ void __launch_bounds__(kThreads) softmax_rows_kernel(const uint4 *src, uint4 *dst, int64_t rows) {
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  constexpr float kLog2e = 1.4426950408889634f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    uint4 v[PACKS];
    load_row<PACKS>(src, row, v);
    float z[PACKS][8];
    float m[1] = {-__builtin_huge_valf()};
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const __half2 *h = reinterpret_cast<const __half2 *>(&v[k]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(h[i]);
        z[k][2 * i] = f.x, z[k][2 * i + 1] = f.y;
        m[0] = fmaxf(m[0], fmaxf(f.x, f.y));
      }
    }
    block_all_reduce(m, MaxOp{}, scratch);
    float sum[1] = {0.0f};
#pragma unroll
    for (int k = 0; k < PACKS; ++k)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float d = (z[k][i] - m[0]) * kLog2e;
        float e;
        if (kPoly == 2 || (kPoly == 1 && i % 2 == 1))
          e = exp2_poly(d);
        else
          asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(d));
        z[k][i] = e;
        sum[0] += e;
      }
    block_all_reduce(sum, SumOp{}, scratch);
    const float inv = 1.0f / sum[0];
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      __half2 *h = reinterpret_cast<__half2 *>(&v[k]);
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(z[k][2 * i] * inv, z[k][2 * i + 1] * inv);
    }
    store_row<PACKS>(dst, row, v);
  }
}

// Largest |a - b| / |b| over n halves where |b| >= 2^-14 (normal fp16), in out (device).
__global__ void max_relative_diff(const __half *a, const __half *b, size_t n, float *out) {
  float worst = 0.0f;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = __half2float(a[i]), r = __half2float(b[i]);
    if (fabsf(r) >= 6.1035156e-5f) worst = fmaxf(worst, fabsf(x - r) / fabsf(r));
  }
  atomicMax(reinterpret_cast<int *>(out), __float_as_int(worst));  // non-negative floats order like ints
}

int g_sms = 0;

template <int PACKS, bool kReduce>
double time_rows(const Buffer &src, Buffer &dst, int64_t rows, int blocks_per_sm) {
  return time_us([&] {
    rows_kernel<PACKS, kReduce><<<g_sms * blocks_per_sm, kThreads, 0, g_stream>>>(static_cast<const uint4 *>(src.p),
                                                                                 static_cast<uint4 *>(dst.p), rows);
  });
}

template <int PACKS, int kPoly>
double time_softmax_rows(const Buffer &src, Buffer &dst, int64_t rows) {
  return time_us([&] {
    softmax_rows_kernel<PACKS, kPoly><<<g_sms, kThreads, 0, g_stream>>>(static_cast<const uint4 *>(src.p),
                                                                       static_cast<uint4 *>(dst.p), rows);
  });
}

float relative_diff(const Buffer &a, const Buffer &b, size_t n) {
  static float *d = nullptr;
  if (!d) CUDA_OK(cudaMalloc(&d, sizeof(float)));
  CUDA_OK(cudaMemsetAsync(d, 0, sizeof(float), g_stream));
  max_relative_diff<<<1024, 256, 0, g_stream>>>(static_cast<const __half *>(a.p), static_cast<const __half *>(b.p), n, d);
  float h = 0.0f;
  CUDA_OK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  return h;
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
  if (dtype == 1) {
    const size_t n = size_t(rows) * kCols;
    Buffer mufu(bytes);
    report("softmax mufu", time_softmax_rows<PACKS, 0>(src, mufu, rows), copy);
    report("softmax poly/2", time_softmax_rows<PACKS, 1>(src, dst, rows), copy);
    std::printf("  %-34s %10.2e (largest relative difference from mufu's outputs)\n", "", relative_diff(dst, mufu, n));
    report("softmax poly", time_softmax_rows<PACKS, 2>(src, dst, rows), copy);
    std::printf("  %-34s %10.2e\n", "", relative_diff(dst, mufu, n));
  }
  const Config forced[] = {
      config_of(Variant::kBlock, vec, 0, PACKS, kThreads, 0),  config_of(Variant::kShared, vec, 0, 1, 512, kGridCoversRows),
      config_of(Variant::kShared, vec, 0, 1, 1024, 0),         config_of(Variant::kRing, vec, 3, 4, 512, 0),
      config_of(Variant::kRing, vec, 3, 4, 1024, 0),           config_of(Variant::kRing, vec, 2, 4, 1024, 0)};
  for (int log = 0; log < 2; ++log)
    for (const Config &c : forced) {
      const std::string what = std::string(log ? "log-softmax " : "softmax ") + config_name(c);
      Config launched = c;
      double us = -1.0;
      if (complete_config(launched, OpKind::kSoftmaxForward, dtype, kCols, ctx.info->limits())) {
        xvk_softmax_forward_args a{};
        a.rows = rows, a.cols = kCols, a.dtype = dtype, a.log = log, a.scale = 1.0f;
        a.x = {src.p, kCols}, a.y = {dst.p, kCols};
        us = time_us([&] {
          if (softmax_forward(ctx, a, &launched) != XVK_SUCCESS) std::fprintf(stderr, "softmax_forward failed\n"), std::exit(2);
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
