// Is the channels-first (NCHW) BatchNorm pass 1 held back by the order in
// which it reads memory? Its reduction by columns reads n = 256 rows of
// c * s elements (401 KB at 14 x 14 fp16) a 256- or 512-byte piece per row at
// a time, and takes 81 us for the backward's 212 MB where the channels-last
// kernel reads the same bytes in 67 (h200-2026-11-29-limits.txt 2(d)).
// This program reads two tensors (dy and x) of one NCHW shape, and only reads
// them (no arithmetic but an XOR, one word out per thread), in the orders of:
//   flat       grid-stride 16-byte loads over each tensor, 8 in flight: the floor
//   nhwc       the channels-last reduction's order on the same bytes (rows of c,
//              `tile` lanes of 16-byte vectors across a row, U rows at a time),
//              at 2, 4 or 8 blocks per SM
//   columns    the channels-first reduction's order (batch_norm.cu reduce_columns
//              LONG_ROWS): 64 lanes of 8-byte vectors across a row, 4 rows a
//              block, 2 at a time, two parts of the rows
//   planes K   a block takes K whole channels (K * s contiguous elements) of
//              each sample in turn, 16-byte vectors, U samples at a time
// each timed as xvk-bench times a case (median of launches, memset flush of
// 4x L2 before each), with the copy ceiling of the same bytes. Built with
// xvk-bench (bench/CMakeLists.txt) as xvk-read-patterns.
#include <cstdio>

#include "bench_util.cuh"

using namespace bench;

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x + v.y + v.z + v.w; }
__device__ __forceinline__ unsigned fold(uint2 v) { return v.x + v.y; }

__global__ void flat(const uint4 *__restrict__ a, const uint4 *__restrict__ b, size_t n, unsigned *out) {
  constexpr int U = 4;  // 4 of each tensor: 8 loads in flight
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      va[u] = a[i + u * stride];
      vb[u] = b[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(va[u]) + fold(vb[u]);
  }
  for (; i < n; i += stride) acc ^= fold(a[i]) + fold(b[i]);
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

// Rows of row_len vectors (V: uint2 or uint4); tile lanes across a row, the
// block's other threads down the rows, U rows a thread at a time; part p of
// gridDim.y takes chunks p, p + parts, ... of U * rows_step rows (as
// reduce_columns does).
template <class V, int U>
__global__ void by_columns(const V *__restrict__ a, const V *__restrict__ b, int64_t rows, int64_t row_len, int tile,
                           unsigned *out) {
  const int part = int(blockIdx.y), parts = int(gridDim.y);
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col = int64_t(blockIdx.x) * tile + tx;
  const int64_t chunk = int64_t(U) * rows_step;
  unsigned acc = 0;
  if (col < row_len)
    for (int64_t r0 = part * chunk + ty; r0 < rows; r0 += parts * chunk) {
      V va[U], vb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t r = r0 + int64_t(u) * rows_step;
        if (r < rows) {
          va[u] = a[r * row_len + col];
          vb[u] = b[r * row_len + col];
        } else {
          va[u] = vb[u] = V{};
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= fold(va[u]) + fold(vb[u]);
    }
  out[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

// Block (group, sample part): channels [group * K, group * K + K) of samples
// part, part + parts, ...: a contiguous span of span_vecs 16-byte vectors per
// sample, read U samples at a time.
template <int U>
__global__ void by_planes(const uint4 *__restrict__ a, const uint4 *__restrict__ b, int64_t n, int64_t sample_vecs,
                          int64_t span_vecs, unsigned *out) {
  const int64_t first = int64_t(blockIdx.x) * span_vecs;
  const int part = int(blockIdx.y), parts = int(gridDim.y);
  unsigned acc = 0;
  for (int64_t n0 = part; n0 < n; n0 += int64_t(U) * parts)
    for (int64_t v = threadIdx.x; v < span_vecs; v += blockDim.x) {
      uint4 va[U], vb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t s = n0 + int64_t(u) * parts;
        if (s < n) {
          va[u] = a[s * sample_vecs + first + v];
          vb[u] = b[s * sample_vecs + first + v];
        } else {
          va[u] = vb[u] = uint4{};
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= fold(va[u]) + fold(vb[u]);
    }
  out[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

int main(int argc, char **argv) {
  if (argc > 1) g_reps = parse_reps("reps", argv[1]);
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MB; median of %d launches each, memset flush; two fp16 tensors read\n", prop.name,
              sms, prop.l2CacheSize >> 20, g_reps);
  struct Shape {
    int64_t n, c, s;
  };
  for (Shape sh : {Shape{256, 1024, 196}, Shape{256, 2048, 49}, Shape{256, 512, 784}}) {
    const int64_t numel = sh.n * sh.c * sh.s, bytes = numel * 2;
    Buffer A(bytes), B(bytes), out(size_t(64) << 20);
    CUDA_OK(cudaMemsetAsync(A.p, 1, bytes, g_stream));
    CUDA_OK(cudaMemsetAsync(B.p, 2, bytes, g_stream));
    auto *words = static_cast<unsigned *>(out.p);
    const auto *a16 = static_cast<const uint4 *>(A.p), *b16 = static_cast<const uint4 *>(B.p);
    const auto *a8 = static_cast<const uint2 *>(A.p), *b8 = static_cast<const uint2 *>(B.p);
    const Ceiling ceil = copy_ceiling(size_t(2 * bytes));
    std::printf("\nNCHW %lldx%lldx%lld fp16: 2 x %.1f MB read; copy ceiling of those bytes %.2f us\n",
                (long long)sh.n, (long long)sh.c, (long long)sh.s, bytes / 1e6, ceil.best());
    auto report = [&](const char *name, double us) {
      std::printf("  %-34s %8.2f us  %6.0f GB/s  x copy %.3f\n", name, us, 2 * bytes / us / 1e3, us / ceil.best());
    };
    report("flat (8 blocks/SM)", time_us([&] { flat<<<sms * 8, 256, 0, g_stream>>>(a16, b16, bytes / 16, words); }));
    // Channels-last order: rows of c, `tile` lanes of 16-byte vectors across
    // (the gradient sums' kernel until session 48: a warp, 3 rows at a time,
    // 2 blocks per SM), at other widths, batches and blocks per SM: is it the
    // order or the warps resident? (H200: the warps; 4 blocks per SM read as
    // fast as the flat read.)
    struct Nhwc {
      int tile, u, per_sm;
    };
    for (Nhwc v : {Nhwc{32, 3, 2}, Nhwc{32, 3, 4}, Nhwc{32, 3, 8}, Nhwc{32, 6, 2}, Nhwc{32, 6, 4}, Nhwc{64, 3, 4},
                   Nhwc{256, 3, 2}, Nhwc{256, 3, 4}, Nhwc{256, 6, 2}}) {
      const int64_t row_len = sh.c * 2 / 16, rows = sh.n * sh.s;
      const int tile = int(std::min<int64_t>(v.tile, row_len)), tiles = int((row_len + tile - 1) / tile);
      const int parts = std::max(1, v.per_sm * sms / tiles);
      char name[64];
      std::snprintf(name, sizeof name, "nhwc %d lanes U=%d (%d x %d blocks)", tile, v.u, tiles, parts);
      report(name, time_us([&] {
               const dim3 grid(tiles, parts);
               if (v.u == 3) by_columns<uint4, 3><<<grid, 256, 0, g_stream>>>(a16, b16, rows, row_len, tile, words);
               else by_columns<uint4, 6><<<grid, 256, 0, g_stream>>>(a16, b16, rows, row_len, tile, words);
             }));
    }
    for (int parts : {1, 2, 4}) {  // channels-first rows by columns, as reduce_columns LONG_ROWS
      const int64_t row_len = sh.c * sh.s * 2 / 8, rows = sh.n;
      const int tile = 64, tiles = int((row_len + tile - 1) / tile);
      char name[64];
      std::snprintf(name, sizeof name, "columns 8 B, 64 lanes, %d part(s)", parts);
      report(name, time_us([&] {
               by_columns<uint2, 2><<<dim3(tiles, parts), 256, 0, g_stream>>>(a8, b8, rows, row_len, tile, words);
             }));
    }
    for (int k : {8, 32, 128}) {  // whole channels of each sample
      if ((k * sh.s * 2) % 16 || sh.c % k) continue;
      const int64_t span = k * sh.s * 2 / 16, sample = sh.c * sh.s * 2 / 16;
      const int groups = int(sh.c / k);
      for (int parts : {1, 4, 16}) {
        if (int64_t(groups) * parts < sms) continue;
        char name[64];
        std::snprintf(name, sizeof name, "planes K=%d (%d x %d blocks), U=4", k, groups, parts);
        report(name, time_us([&] {
                 by_planes<4><<<dim3(groups, parts), 256, 0, g_stream>>>(a16, b16, sh.n, sample, span, words);
               }));
      }
    }
  }
  return 0;
}
