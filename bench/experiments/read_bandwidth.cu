// How fast can a read-only pass go after the benchmark's L2 flush? (BatchNorm's
// pass 1 reads x, or dy and x, and writes next to nothing.) Times, with
// bench::time_us (its memset flush of 4x L2, which leaves L2 dirty, or a read
// of 4x L2, which leaves it clean), a kernel that only reads (U independent
// 16-byte loads per thread per trip, grid-stride, one word out per thread)
// against the copy ceiling of the same bytes (bench::copy_ceiling, as
// xvk-bench computes it), on 25, 51 and 205 MB. Built with xvk-bench
// (bench/CMakeLists.txt) as xvk-read-bandwidth.
#include <cstdio>

#include "bench_util.cuh"

using namespace bench;

template <int U>
__global__ void read_only(const uint4 *__restrict__ src, size_t n, unsigned *__restrict__ out) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = src[i];
    acc ^= v.x + v.y + v.z + v.w;
  }
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

int main() {
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MB; median of %d launches each\n", prop.name, sms, prop.l2CacheSize >> 20, g_reps);
  const size_t max_bytes = 205520896;
  Buffer src(max_bytes), dst(max_bytes / 2), out(size_t(sms) * 8 * 256 * sizeof(unsigned));
  CUDA_OK(cudaMemsetAsync(src.p, 1, max_bytes, g_stream));
  const auto *x = static_cast<const uint4 *>(src.p);
  auto *words = static_cast<unsigned *>(out.p);
  // The clean flush: read 4x L2 (g_flush, which the memset flush writes).
  const auto read_flush = [&] {
    read_only<8><<<sms * 8, 256, 0, g_stream>>>(static_cast<const uint4 *>(g_flush->p), g_flush->bytes / 16, words);
  };
  for (size_t bytes : {size_t(25690112), size_t(51380224), max_bytes}) {
    const size_t n = bytes / 16;
    for (int clean = 0; clean < 2; ++clean) {
      const std::function<void()> flush = clean ? std::function<void()>(read_flush) : std::function<void()>();
      const char *how = clean ? "reads" : "memset";
      for (int per_sm : {4, 8}) {
        const double u4 = time_us([&] { read_only<4><<<sms * per_sm, 256, 0, g_stream>>>(x, n, words); }, flush);
        const double u8 = time_us([&] { read_only<8><<<sms * per_sm, 256, 0, g_stream>>>(x, n, words); }, flush);
        std::printf("%6.1f MB  flush by %-6s  read-only, %d blocks/SM: U=4 %8.2f us %6.0f GB/s, U=8 %8.2f us %6.0f GB/s\n",
                    bytes / 1e6, how, per_sm, u4, bytes / u4 / 1e3, u8, bytes / u8 / 1e3);
      }
      // The same bytes moved by a copy (half read, half written).
      if (clean) {
        const double k = time_us([&] { launch_copy_kernel(x, dst.p, n / 2); }, flush);
        std::printf("%6.1f MB  flush by %-6s  copy kernel (bytes/2 each way)  %8.2f us %6.0f GB/s\n", bytes / 1e6, how,
                    k, bytes / k / 1e3);
      } else {
        const Ceiling c = copy_ceiling(bytes);
        std::printf("%6.1f MB  flush by %-6s  copy ceiling (bytes/2 each way): cudaMemcpy %8.2f us, copy kernel %8.2f us,"
                    " best %6.0f GB/s\n",
                    bytes / 1e6, how, c.memcpy_us, c.kernel_us, bytes / c.best() / 1e3);
      }
    }
  }
  return 0;
}
