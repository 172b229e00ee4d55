// Can the norm forward's small-grid shapes reach the copy time if each warp
// keeps its next rows in flight without holding them in registers?
// The 16-bit LayerNorm/RMSNorm forwards of 8192 x 768 and 8192 x 1024 take
// 1.16-1.25x the copy time on the H200 with their best register kernel
// (h100-2026-11-27-forward-8192x1024-profile.txt: 64 registers a thread, so
// the grid covering the rows runs in two waves, the second wave's loads
// starting only as the first finishes; the copy kernel's grid is resident at
// once and issues every load at the start). Here a persistent grid of warps
// takes row after row, a row per warp, through a ring of `slots` row slots
// per warp in shared memory, filled by cp.async: each lane copies its own
// 16-byte vectors of the row and reads back only those, so no barrier is
// needed; a slot is refilled with the warp's row `slots` ahead as soon as its
// row is in registers. Kinds:
//   ring copy  rows through the ring, stored unchanged (the construct's floor)
//   ring LN    LayerNorm, gamma and beta in x's dtype, mean and rstd written
//   ring RMS   RMSNorm, gamma in x's dtype, rstd written
// beside the library's norm forward with its table's choice, each kind's
// largest difference from the library's output, and bench's copy kernel on
// the same bytes. Median of L2-flushed launches (bench::time_us).
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "kernel_context.cuh"

using namespace bench;
using namespace xvk::gpu;

namespace {

enum Kind { kCopy, kLayerNorm, kRmsNorm };

template <class T, int PACKS, int KIND>
__global__ void __launch_bounds__(512) warp_ring_kernel(const xvk_norm_forward_args a, int slots) {
  constexpr int VEC = kMaxVec<T>;
  using P = Pack<T, VEC>;
  extern __shared__ uint4 shared[];
  const int lane = lane_id(), warps = int(blockDim.x) / kWarpSize;
  // This lane's first vector of the warp's slot 0; slot s, pack p at [(s * PACKS + p) * kWarpSize].
  P *const ring = reinterpret_cast<P *>(shared) + warp_id() * slots * PACKS * kWarpSize + lane;
  const int64_t step = int64_t(gridDim.x) * warps, first = int64_t(blockIdx.x) * warps + warp_id();
  int64_t copy_row = first;
  int copy_slot = 0;
  auto copy_next = [&] {
    if (copy_row < a.rows) {
      const P *x = reinterpret_cast<const P *>(static_cast<const T *>(a.x.data) + copy_row * a.x.row_stride) + lane;
#pragma unroll
      for (int p = 0; p < PACKS; ++p) copy_async_16(ring + (copy_slot * PACKS + p) * kWarpSize, x + p * kWarpSize);
    }
    async_copies_commit();  // a group per row, empty past the last: the waits count rows
    copy_row += step;
    if (++copy_slot == slots) copy_slot = 0;
  };
  for (int s = 0; s < slots; ++s) copy_next();
  const float inv_cols = 1.0f / float(a.cols);
  int slot = 0;
  for (int64_t row = first; row < a.rows; row += step) {
    async_copies_wait(slots - 1);  // this row's group has landed
    P v[PACKS];
#pragma unroll
    for (int p = 0; p < PACKS; ++p) v[p] = ring[(slot * PACKS + p) * kWarpSize];
    copy_next();  // into the slot just read: its row is in registers
    if (++slot == slots) slot = 0;
    P *y = reinterpret_cast<P *>(static_cast<T *>(a.y.data) + row * a.y.row_stride) + lane;
    if constexpr (KIND == kCopy) {
#pragma unroll
      for (int p = 0; p < PACKS; ++p) y[p * kWarpSize] = v[p];
    } else {
      float h[PACKS][VEC];
#pragma unroll
      for (int p = 0; p < PACKS; ++p) unpack(v[p], h[p]);
      float mean = 0.0f, var = 0.0f;
      if constexpr (KIND == kLayerNorm) {
#pragma unroll
        for (int p = 0; p < PACKS; ++p)
#pragma unroll
          for (int i = 0; i < VEC; ++i) mean += h[p][i];
        mean = group_all_reduce<kWarpSize>(mean, SumOp{}) * inv_cols;
      }
#pragma unroll
      for (int p = 0; p < PACKS; ++p)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float d = h[p][i] - mean;
          var += d * d;
        }
      var = group_all_reduce<kWarpSize>(var, SumOp{});
      const float rstd = rsqrtf(var * inv_cols + a.epsilon);
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = (p * kWarpSize + lane) * VEC;
        float g[VEC], b[VEC], out[VEC];
        load_vec<T, VEC>(static_cast<const T *>(a.gamma) + col, g);
        if constexpr (KIND == kLayerNorm) {
          load_vec<T, VEC>(static_cast<const T *>(a.beta) + col, b);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) b[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = (h[p][i] - mean) * rstd * g[i] + b[i];
        y[p * kWarpSize] = to_pack<T, VEC>(out);
      }
      if (lane == 0) {
        if (a.mean) a.mean[row] = mean;
        if (a.rstd) a.rstd[row] = rstd;
      }
    }
  }
  async_copies_wait<0>();  // (only empty groups can be left: rows past the last)
}

// Largest |a - b| over n elements of dtype (1 fp16, 2 bf16, 0 fp32), as floats.
__global__ void max_abs_diff(const void *a, const void *b, size_t n, int dtype, float *out) {
  float worst = 0.0f;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float x, r;
    if (dtype == 0) {
      x = static_cast<const float *>(a)[i], r = static_cast<const float *>(b)[i];
    } else if (dtype == 1) {
      x = __half2float(static_cast<const __half *>(a)[i]), r = __half2float(static_cast<const __half *>(b)[i]);
    } else {
      x = to_float(static_cast<const bfloat16 *>(a)[i]), r = to_float(static_cast<const bfloat16 *>(b)[i]);
    }
    worst = fmaxf(worst, x != x || r != r ? 1e30f : fabsf(x - r));
  }
  atomicMax(reinterpret_cast<int *>(out), __float_as_int(worst));  // non-negative floats order like ints
}

float abs_diff(const void *a, const void *b, size_t n, int dtype) {
  static float *d = nullptr;
  if (!d) CUDA_OK(cudaMalloc(&d, sizeof(float)));
  CUDA_OK(cudaMemsetAsync(d, 0, sizeof(float), g_stream));
  max_abs_diff<<<1024, 256, 0, g_stream>>>(a, b, n, dtype, d);
  float h = 0.0f;
  CUDA_OK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

int g_sms = 0;

struct Shape {
  int dtype;  // 0 fp32, 1 fp16, 2 bf16 (bench's fill codes)
  int64_t rows, cols;
};

template <class T, int PACKS>
void run(Context &ctx, const Shape &s) {
  constexpr int VEC = kMaxVec<T>;
  if (int64_t(PACKS) * kWarpSize * VEC != s.cols) std::fprintf(stderr, "PACKS does not fit the row\n"), std::exit(2);
  const size_t n = size_t(s.rows) * s.cols, bytes = n * sizeof(T);
  Buffer x(bytes), y(bytes), ref(bytes), gamma(s.cols * sizeof(T)), beta(s.cols * sizeof(T));
  Buffer mean(s.rows * 4), rstd(s.rows * 4), ref_mean(s.rows * 4), ref_rstd(s.rows * 4);
  fill(x.p, s.dtype, n, 7, 0.0f, 1.0f);
  fill(gamma.p, s.dtype, s.cols, 3, 1.0f, 0.1f);
  fill(beta.p, s.dtype, s.cols, 4, 0.0f, 0.1f);
  const double copy = copy_ceiling(2 * bytes).best();
  const char *names[] = {"fp32", "fp16", "bf16"};
  std::printf("\n%s %lld x %lld (%.1f MB each way): copy %.2f us\n", names[s.dtype], (long long)s.rows,
              (long long)s.cols, bytes / 1e6, copy);
  for (int rms = 0; rms < 2; ++rms) {
    xvk_norm_forward_args a{};
    a.rows = s.rows, a.cols = s.cols, a.dtype = s.dtype == 0 ? XVK_DTYPE_F32 : s.dtype == 1 ? XVK_DTYPE_F16 : XVK_DTYPE_BF16;
    a.rms = rms, a.epsilon = 1e-5f, a.param_dtype = a.dtype;
    a.x = {x.p, s.cols}, a.y = {ref.p, s.cols};
    a.gamma = gamma.p, a.beta = rms ? nullptr : beta.p;
    a.mean = rms ? nullptr : static_cast<float *>(ref_mean.p), a.rstd = static_cast<float *>(ref_rstd.p);
    const double lib = time_us([&] {
      if (norm_forward(ctx, a, nullptr) != XVK_SUCCESS) std::fprintf(stderr, "norm_forward failed\n"), std::exit(2);
    });
    std::printf("  %-8s library (table)              %8.2f us %6.3fx copy\n", rms ? "RMSNorm" : "LayerNorm", lib,
                lib / copy);
    xvk_norm_forward_args r = a;
    r.y = {y.p, s.cols};
    r.mean = rms ? nullptr : static_cast<float *>(mean.p), r.rstd = static_cast<float *>(rstd.p);
    for (int kind : {int(kCopy), rms ? int(kRmsNorm) : int(kLayerNorm)}) {
      auto kernel = kind == kCopy ? warp_ring_kernel<T, PACKS, kCopy>
                                  : rms ? warp_ring_kernel<T, PACKS, kRmsNorm> : warp_ring_kernel<T, PACKS, kLayerNorm>;
      if (kind == kCopy && rms) continue;  // once per shape
      for (int warps : {4, 8, 16})
        for (int slots : {2, 3, 4, 6, 8}) {
          const int smem = warps * slots * PACKS * kWarpSize * 16;
          if (smem > 200 * 1024) continue;
          CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
          int per_sm = 0;
          CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * kWarpSize, smem));
          if (per_sm < 1) continue;
          const int grid = per_sm * g_sms;
          CUDA_OK(cudaMemsetAsync(y.p, 0xff, bytes, g_stream));
          const double us = time_us([&] { kernel<<<grid, warps * kWarpSize, smem, g_stream>>>(r, slots); });
          CUDA_OK(cudaGetLastError());
          const float dy = abs_diff(y.p, kind == kCopy ? x.p : ref.p, n, s.dtype);
          const float dr = kind == kCopy ? 0.0f : abs_diff(rstd.p, ref_rstd.p, s.rows, 0);
          std::printf("  %-8s ring w%-2d s%d (%d/SM, %3d KB)   %8.2f us %6.3fx copy  (max |diff| y %.2e rstd %.2e)\n",
                      kind == kCopy ? "copy" : rms ? "RMSNorm" : "LayerNorm", warps, slots, per_sm, smem / 1024, us,
                      us / copy, dy, dr);
        }
    }
  }
}

}  // namespace

int main(int argc, char **argv) {
  init();
  g_reps = argc > 1 ? std::atoi(argv[1]) : 30;
  Context ctx;
  init_kernel_context(ctx);
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs; median of %d launches each, L2 flushed before each\n", prop.name, g_sms, g_reps);
  run<__half, 3>(ctx, {1, 8192, 768});
  run<__half, 4>(ctx, {1, 8192, 1024});
  run<bfloat16, 3>(ctx, {2, 8192, 768});
  run<bfloat16, 4>(ctx, {2, 8192, 1024});
  run<__half, 1>(ctx, {1, 49152, 256});
  run<__half, 2>(ctx, {1, 49152, 512});
  run<__half, 4>(ctx, {1, 49152, 1024});
  run<float, 6>(ctx, {0, 8192, 768});
  run<float, 8>(ctx, {0, 8192, 1024});
  run<float, 1>(ctx, {0, 49152, 128});
  return 0;
}
