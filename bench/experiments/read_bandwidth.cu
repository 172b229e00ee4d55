// How fast can a read-only pass go after the benchmark's L2 flush? (BatchNorm's
// pass 1 reads x, or dy and x, and writes next to nothing.) Times, after a
// flush of 4x L2 by cudaMemset (what bench/bench_util.cuh does before every
// timed launch) or by reading 4x L2 (which leaves clean lines): a read-only
// kernel (U independent 16-byte loads per thread per trip, grid-stride, one
// word out per thread) and a copy kernel of the same structure, on 25, 51
// and 205 MB. Median of 30 launches each.
// Build: nvcc -O3 -arch=sm_90 -o read_bandwidth read_bandwidth.cu
#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_));                 \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

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

template <int U>
__global__ void copy(const uint4 *__restrict__ src, size_t n, uint4 *__restrict__ dst) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const size_t flush_bytes = size_t(prop.l2CacheSize) * 4, max_bytes = 205520896;
  uint4 *flush, *src, *dst;
  unsigned *out;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&out, 64 << 20));
  CK(cudaMemset(src, 1, max_bytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const int sms = prop.multiProcessorCount;
  for (size_t bytes : {size_t(25690112), size_t(51380224), max_bytes}) {
    const size_t n = bytes / 16;
    for (int flush_kind = 0; flush_kind < 2; ++flush_kind) {
      for (int kind = 0; kind < 6; ++kind) {
        const int per_sm = kind % 2 == 0 ? 4 : 8, threads = 256;
        const int grid = sms * per_sm;
        std::vector<float> t;
        for (int rep = 0; rep < 30; ++rep) {
          if (flush_kind == 0) CK(cudaMemsetAsync(flush, rep & 0xff, flush_bytes));
          else read_only<8><<<sms * 8, 256>>>(flush, flush_bytes / 16, out);
          CK(cudaEventRecord(a));
          if (kind < 2) read_only<4><<<grid, threads>>>(src, n, out);
          else if (kind < 4) read_only<8><<<grid, threads>>>(src, n, out);
          else copy<4><<<grid, threads>>>(src, n / 2, dst);  // half read, half written: the same bytes moved
          CK(cudaEventRecord(b));
          CK(cudaEventSynchronize(b));
          float ms;
          CK(cudaEventElapsedTime(&ms, a, b));
          t.push_back(ms * 1000);
        }
        std::sort(t.begin(), t.end());
        const float us = t[t.size() / 2];
        const char *name = kind < 2 ? "read U=4" : kind < 4 ? "read U=8" : "copy U=4 (bytes/2 each way)";
        std::printf("%6.1f MB  flush by %-6s  %-28s %d blocks/SM  %8.2f us  %6.0f GB/s\n", bytes / 1e6,
                    flush_kind == 0 ? "memset" : "reads", name, per_sm, us, bytes / us / 1e3);
      }
    }
  }
  return 0;
}
