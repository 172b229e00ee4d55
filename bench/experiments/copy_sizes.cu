// Does the copy ceiling depend on the exact byte count? In the tables the
// cases whose bytes are whole MiB (softmax: x and y only) got a copy time
// 5-8% below that of the norms' cases a few hundred bytes larger (gamma,
// statistics). This times, on the benchmark's harness (bench::time_us, L2
// flushed before each launch), cudaMemcpy and copy kernels of three shapes on
// whole-MiB sizes and on sizes a little over them:
//   tail      the ceiling's copy kernel until 2026-11-28: a block per 4 x 256
//             vectors, 4 loads at grid stride, a scalar loop for the rest
//   kernel    bench::copy_kernel, the ceiling's now: the same grid, every
//             access predicated, one trip for every thread
//   blocks    block b copies vectors [1024 b, 1024 b + 1024), 4 per thread,
//             predicated (as a grid of a block per rows does): copy_per_thread<4>
// Then, on whole-MiB sizes, the same one-trip copy with K = 1, 2, 4, 8
// vectors per thread (a block per 256 K vectors): how the copy time
// depends on the bytes each thread has in flight.
// Results: bench/results/h200-2026-11-28-copy-sizes.txt.
#include <cstdio>

#include "bench_util.cuh"

using namespace bench;

__global__ void __launch_bounds__(256) copy_tail(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

template <int K>
__global__ void __launch_bounds__(256) copy_per_thread(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  const size_t first = size_t(blockIdx.x) * 256 * K + threadIdx.x;
  uint4 v[K];
#pragma unroll
  for (int u = 0; u < K; ++u)
    if (first + 256 * u < n) v[u] = src[first + 256 * u];
#pragma unroll
  for (int u = 0; u < K; ++u)
    if (first + 256 * u < n) dst[first + 256 * u] = v[u];
}

template <int K>
double time_per_thread(const Buffer &src, Buffer &dst, size_t n) {
  const int blocks = int((n + 256 * K - 1) / (256 * K));
  return time_us([&] {
    copy_per_thread<K><<<blocks, 256, 0, g_stream>>>(static_cast<const uint4 *>(src.p), static_cast<uint4 *>(dst.p), n);
  });
}

int main() {
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB; median of %d launches each, L2 flushed before each\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, g_reps);
  constexpr size_t kMiB = size_t(1) << 20;
  Buffer src(64 * kMiB), dst(64 * kMiB);
  CUDA_OK(cudaMemsetAsync(src.p, 1, 64 * kMiB, g_stream));
  std::printf("%12s %9s %9s %9s %9s %9s\n", "case bytes", "memcpy", "tail", "kernel", "blocks", "ceiling");
  for (size_t mib : {12, 16, 24, 32, 48, 96}) {
    for (long extra : {0L, 256L, 512L, 4096L, 65536L}) {
      const size_t bytes = mib * kMiB + size_t(extra);
      const size_t half = (bytes / 2 + 15) / 16 * 16, n = half / 16;
      const int blocks = int((n + 1023) / 1024);
      const double m = time_us([&] { CUDA_OK(cudaMemcpyAsync(dst.p, src.p, half, cudaMemcpyDeviceToDevice, g_stream)); });
      const double t = time_us([&] {
        copy_tail<<<blocks, 256, 0, g_stream>>>(static_cast<const uint4 *>(src.p), static_cast<uint4 *>(dst.p), n);
      });
      const double k = time_us([&] { launch_copy_kernel(src.p, dst.p, n); });
      const double b = time_per_thread<4>(src, dst, n);
      std::printf("%12zu %9.2f %9.2f %9.2f %9.2f %9.2f\n", bytes, m, t, k, b, copy_ceiling(bytes).best());
    }
  }
  std::printf("\n%12s %9s %9s %9s %9s   (us; K 16-byte vectors per thread)\n", "case bytes", "K=1", "K=2", "K=4", "K=8");
  for (size_t mib : {12, 24, 48, 96}) {
    const size_t n = mib * kMiB / 2 / 16;
    std::printf("%12zu %9.2f %9.2f %9.2f %9.2f\n", mib * kMiB, time_per_thread<1>(src, dst, n), time_per_thread<2>(src, dst, n),
                time_per_thread<4>(src, dst, n), time_per_thread<8>(src, dst, n));
  }
  return 0;
}
