// layer_norm and rms_norm, forward and backward (args.rms tells them apart).
//
// Variants, as for softmax (see softmax.cu):
//  - registers: a group of G lanes (or the whole block) holds the row; the
//    mean and variance are two exact passes over registers (one memory read);
//  - shared (forward only): a block reads the row once into shared memory,
//    summing it, then takes the variance and normalizes the row from there;
//  - reread: reads the row from memory twice, merging per-vector Welford
//    statistics (Chan's parallel formula) in the first read; its backward
//    keeps dgamma/dbeta sums in registers while they fit (kRereadSums),
//    else sums them in a separate pass over columns.
// dgamma/dbeta are reduced without float atomics: each warp (register
// variants) or row chunk (reread) writes its partial sums, and a finalize
// kernel adds them in a fixed order, so results are bitwise reproducible.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/launch.cuh"

namespace xvk::gpu {
namespace {

// gamma/beta: x's dtype or float32, told at run time (a uniform branch).
template <class T, int VEC>
__device__ __forceinline__ void load_param(const void *p, bool f32, int64_t col, float (&out)[VEC]) {
  if (f32)
    load_vec<float, VEC>(static_cast<const float *>(p) + col, out);
  else
    load_vec<T, VEC>(static_cast<const T *>(p) + col, out);
}

// The scale and shift of one lane's columns: gamma (1 + gamma when zero
// centered, 1 when absent) and beta (0 when absent).
template <class T, int VEC>
__device__ __forceinline__ void load_affine(const void *gamma, const void *beta, bool f32, bool zero_centered,
                                            int64_t col, float (&g)[VEC], float (&b)[VEC]) {
  if (gamma) {
    load_param<T, VEC>(gamma, f32, col, g);
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] += zero_centered ? 1.0f : 0.0f;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] = 1.0f;
  }
  if (beta) {
    load_param<T, VEC>(beta, f32, col, b);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) b[i] = 0.0f;
  }
}

// h += residual r, rounded to T as residual_out holds it, and written to
// residual_out (at row, col) when asked.
template <class T, int VEC>
__device__ __forceinline__ void add_residual(const xvk_norm_forward_args &a, int64_t row, int64_t col, float (&h)[VEC],
                                             const float (&r)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) h[i] = to_float(from_float<T>(h[i] + r[i]));
  if (a.residual_out.data)
    store_vec<T, VEC>(static_cast<T *>(a.residual_out.data) + row * a.residual_out.row_stride + col, h);
}

// h = x (+ residual, see add_residual).
template <class T, int VEC>
__device__ __forceinline__ void load_input(const xvk_norm_forward_args &a, int64_t row, int64_t col, float (&h)[VEC]) {
  load_vec<T, VEC>(static_cast<const T *>(a.x.data) + row * a.x.row_stride + col, h);
  if (!a.residual.data) return;
  float r[VEC];
  load_vec<T, VEC>(static_cast<const T *>(a.residual.data) + row * a.residual.row_stride + col, r);
  add_residual<T, VEC>(a, row, col, h, r);
}

// The row's first input: statistics are computed around it. x - shift is
// exact for values within a factor of two (Sterbenz), so data with a large
// offset (mean 1e4, std 1e-2) keeps its variance in float32 arithmetic.
template <class T>
__device__ __forceinline__ float row_shift(const xvk_norm_forward_args &a, int64_t row) {
  if (a.rms) return 0.0f;
  const float x0 = to_float(static_cast<const T *>(a.x.data)[row * a.x.row_stride]);
  if (!a.residual.data) return x0;
  return to_float(from_float<T>(x0 + to_float(static_cast<const T *>(a.residual.data)[row * a.residual.row_stride])));
}

// Registers cache gamma/beta across rows while a lane's share is small.
template <int PACKS, int VEC>
inline constexpr bool kCacheAffine = PACKS * VEC <= 8;

template <class T, int VEC, int PACKS, int G, int ROWS>
__global__ void __launch_bounds__(register_kernel_max_threads(false, PACKS * VEC * ROWS)) norm_forward_registers(const xvk_norm_forward_args a) {
  __shared__ float scratch[ROWS][kMaxWarpsPerBlock];
  constexpr bool kCache = kCacheAffine<PACKS, VEC>;
  const RowMapping<G, ROWS> map;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  float g[kCache ? PACKS : 1][VEC], b[kCache ? PACKS : 1][VEC];
  if constexpr (kCache) {
#pragma unroll
    for (int p = 0; p < PACKS; ++p)
      if (map.col(p, VEC) < a.cols) load_affine<T, VEC>(a.gamma, a.beta, f32, a.zero_centered_gamma, map.col(p, VEC), g[p], b[p]);
  }
  const float inv_cols = 1.0f / float(a.cols);
  // When the owners' packs cover the row exactly (the common widths), no
  // element needs the per-element tests for columns past the end: the loop
  // is compiled twice, once without them (kFull), chosen once per launch.
  // A group past the last row computes on zeros and writes nothing; its
  // lanes reduce only among themselves. Only for lanes of up to 16 elements:
  // with more, the second copy made ptxas spill more (sm_90).
  constexpr bool kVersionFull = PACKS * VEC * ROWS <= 16;
  const bool full = int64_t(PACKS) * map.width * VEC == a.cols;
  auto rows_loop = [&](auto full_tag) {
    constexpr bool kFull = decltype(full_tag)::value;
    for (int64_t base = map.first_warp_row; base < a.rows; base += map.row_step) {
      // h holds x (+ residual) - shift; mean and var are those of h.
      float h[ROWS][PACKS][VEC], shift[ROWS], mean[ROWS], var[ROWS];
      {
        Pack<T, VEC> raw[ROWS][PACKS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          const int64_t row = base + map.offset + r;
          shift[r] = row < a.rows ? row_shift<T>(a, row) : 0.0f;
          issue_row(map, static_cast<const T *>(a.x.data) + row * a.x.row_stride, row < a.rows, a.cols, raw[r]);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) unpack_row(raw[r], h[r]);
        if (a.residual.data) {  // h = x + residual, rounded to T as residual_out holds it
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            const int64_t row = base + map.offset + r;
            issue_row(map, static_cast<const T *>(a.residual.data) + row * a.residual.row_stride, row < a.rows, a.cols,
                      raw[r]);
          }
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            const int64_t row = base + map.offset + r;
            float res[PACKS][VEC];
            unpack_row(raw[r], res);
#pragma unroll
            for (int p = 0; p < PACKS; ++p)
              if (row < a.rows && map.col(p, VEC) < a.cols) add_residual<T, VEC>(a, row, map.col(p, VEC), h[r][p], res[p]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int64_t row = base + map.offset + r;
        mean[r] = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const bool in = kFull || (row < a.rows && map.col(p, VEC) < a.cols);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            h[r][p][i] = in ? h[r][p][i] - shift[r] : 0.0f;
            mean[r] += h[r][p][i];
          }
        }
      }
      if (a.rms) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) mean[r] = 0.0f;
      } else {
        RowReducer<G>::all_reduce(mean, SumOp{}, scratch);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) mean[r] *= inv_cols;
      }
      // Second pass over registers: the exact variance around the mean.
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        var[r] = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; ++p)
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = kFull || map.col(p, VEC) < a.cols ? h[r][p][i] - mean[r] : 0.0f;
            var[r] += d * d;
          }
      }
      RowReducer<G>::all_reduce(var, SumOp{}, scratch);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int64_t row = base + map.offset + r;
        if (row >= a.rows) continue;
        const float rstd = rsqrtf(var[r] * inv_cols + a.epsilon);
        T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const int col = map.col(p, VEC);
          if (!kFull && col >= a.cols) continue;
          float gp[VEC], bp[VEC], out[VEC];
          if constexpr (kCache) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) gp[i] = g[p][i], bp[i] = b[p][i];
          } else {
            load_affine<T, VEC>(a.gamma, a.beta, f32, a.zero_centered_gamma, col, gp, bp);
          }
#pragma unroll
          for (int i = 0; i < VEC; ++i) out[i] = (h[r][p][i] - mean[r]) * rstd * gp[i] + bp[i];
          store_vec<T, VEC>(y + col, out);
        }
        if (map.lane == 0) {
          if (a.mean) a.mean[row] = shift[r] + mean[r];
          if (a.rstd) a.rstd[row] = rstd;
        }
      }
    }
  };
  if constexpr (kVersionFull) {
    if (full) return rows_loop(std::true_type{});
  }
  rows_loop(std::false_type{});
}

// Welford statistics of a set of values: count, mean, sum of squared deviations.
struct Welford {
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  // Chan et al.'s merge of two disjoint sets.
  __device__ __forceinline__ void merge(float n_b, float mean_b, float m2_b) {
    const float n_ab = n + n_b;
    if (n_ab == 0.0f) return;
    const float delta = mean_b - mean, w = n_b / n_ab;
    mean += delta * w;
    m2 += m2_b + delta * delta * n * w;
    n = n_ab;
  }
};

// Merges every thread's Welford statistics across the block; all threads get the result.
__device__ __forceinline__ Welford block_welford(Welford w, float (*scratch)[kMaxWarpsPerBlock]) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    w.merge(shfl_xor(w.n, offset, kWarpSize), shfl_xor(w.mean, offset, kWarpSize), shfl_xor(w.m2, offset, kWarpSize));
  if (lane_id() == 0) {
    scratch[0][warp_id()] = w.n;
    scratch[1][warp_id()] = w.mean;
    scratch[2][warp_id()] = w.m2;
  }
  __syncthreads();
  Welford total;
  const int warps = int(blockDim.x) / kWarpSize;
  for (int k = 0; k < warps; ++k) total.merge(scratch[0][k], scratch[1][k], scratch[2][k]);
  __syncthreads();
  return total;
}

// Vectors a thread of the streaming kernels loads before it uses any, so
// that they are in flight together: 4, or 3 of 16-bit types (8 floats each
// once unpacked; with 4, ptxas spilled under the 1024-thread register bound).
template <class T>
inline constexpr int kIssue = sizeof(T) == 2 ? 3 : 4;

// A block streams each of its rows: pass 1 reads x (+ residual) once, pass 2
// writes the output from the row read again from memory (reread:
// residual_out when it was written, else x and residual, where L2 may still
// hold them) or from the copy of x (+ residual) that pass 1 left in shared
// memory (kStaged). Each thread stages and reads back only its own vectors,
// so the staging needs no barrier of its own.
// Statistics: RMSNorm sums squares in pass 1. LayerNorm sums h - shift in
// pass 1; staged, its variance is then an exact second pass over shared
// memory, and re-reading, pass 1 merges per-vector Welford statistics
// instead (a division per vector, but no third read of memory).
template <class T, int VEC, bool kStaged>
__device__ __forceinline__ void norm_forward_streamed(const xvk_norm_forward_args &a, Pack<T, VEC> *staged,
                                                      float (*scratch)[kMaxWarpsPerBlock]) {
  using P = Pack<T, VEC>;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  const bool welford = !kStaged && !a.rms;
  const int64_t vectors = a.cols / VEC;  // VEC divides cols on the vector path
  const int64_t stride = blockDim.x;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float shift = row_shift<T>(a, row);
    const P *x = reinterpret_cast<const P *>(static_cast<const T *>(a.x.data) + row * a.x.row_stride);
    const P *res = a.residual.data
                       ? reinterpret_cast<const P *>(static_cast<const T *>(a.residual.data) + row * a.residual.row_stride)
                       : nullptr;
    Welford w;         // LayerNorm re-reading: of h - shift, merged vector by vector
    float sum = 0.0f;  // otherwise: of h * h (RMSNorm) or of h - shift
    for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += kIssue<T> * stride) {
      P raw[kIssue<T>], raw_res[kIssue<T>];
#pragma unroll
      for (int u = 0; u < kIssue<T>; ++u)
        if (v0 + u * stride < vectors) raw[u] = load_global(x + v0 + u * stride);
      if (res) {
#pragma unroll
        for (int u = 0; u < kIssue<T>; ++u)
          if (v0 + u * stride < vectors) raw_res[u] = load_global(res + v0 + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kIssue<T>; ++u) {
        const int64_t v = v0 + u * stride;
        if (v >= vectors) continue;  // not break: hipcc leaves a loop with a break un-unrolled
        float h[VEC];
        unpack(raw[u], h);
        if (res) {
          float r[VEC];
          unpack(raw_res[u], r);
          add_residual<T, VEC>(a, row, v * VEC, h, r);
          if constexpr (kStaged) staged[v] = to_pack<T, VEC>(h);  // exact: h is rounded to T
        } else if constexpr (kStaged) {
          staged[v] = raw[u];
        }
        if (a.rms) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) sum += h[i] * h[i];
        } else if (!welford) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) sum += h[i] - shift;
        } else {
          float chunk_sum = 0.0f, m2 = 0.0f;
#pragma unroll
          for (int i = 0; i < VEC; ++i) chunk_sum += h[i] - shift;
          const float chunk_mean = chunk_sum * (1.0f / float(VEC));
#pragma unroll
          for (int i = 0; i < VEC; ++i) m2 += (h[i] - shift - chunk_mean) * (h[i] - shift - chunk_mean);
          w.merge(float(VEC), chunk_mean, m2);
        }
      }
    }
    float mean = 0.0f, m2;  // of h - shift
    if (welford) {
      const Welford total = block_welford(w, scratch);
      mean = total.mean;
      m2 = total.m2;
    } else {
      float total[1] = {sum};
      block_all_reduce(total, SumOp{}, scratch);
      m2 = total[0];
      if constexpr (kStaged) {
        if (!a.rms) {  // second pass, over this thread's staged vectors: the exact variance around the mean
          mean = total[0] / float(a.cols);
          float q[1] = {0.0f};
          for (int64_t v = threadIdx.x; v < vectors; v += stride) {
            float h[VEC];
            unpack(staged[v], h);
#pragma unroll
            for (int i = 0; i < VEC; ++i) q[0] += (h[i] - shift - mean) * (h[i] - shift - mean);
          }
          block_all_reduce(q, SumOp{}, scratch);
          m2 = q[0];
        }
      }
    }
    const float rstd = rsqrtf(m2 / float(a.cols) + a.epsilon);
    T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
    for (int64_t v = threadIdx.x; v < vectors; v += stride) {
      const int64_t col = v * VEC;
      float h[VEC], g[VEC], b[VEC];
      if constexpr (kStaged)
        unpack(staged[v], h);
      else if (a.residual_out.data)  // h was written in pass 1: one read instead of two
        load_vec<T, VEC>(static_cast<const T *>(a.residual_out.data) + row * a.residual_out.row_stride + col, h);
      else
        load_input<T, VEC>(a, row, col, h);
      load_affine<T, VEC>(a.gamma, a.beta, f32, a.zero_centered_gamma, col, g, b);
#pragma unroll
      for (int i = 0; i < VEC; ++i) h[i] = (h[i] - shift - mean) * rstd * g[i] + b[i];
      store_vec<T, VEC>(y + col, h);
    }
    if (threadIdx.x == 0) {
      if (a.mean) a.mean[row] = shift + mean;
      if (a.rstd) a.rstd[row] = rstd;
    }
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(1024) norm_forward_reread(const xvk_norm_forward_args a) {
  __shared__ float scratch[3][kMaxWarpsPerBlock];
  norm_forward_streamed<T, VEC, false>(a, nullptr, scratch);
}

// The row in shared memory: launched with shared_bytes(kNormForward, cols) of it.
template <class T, int VEC>
__global__ void __launch_bounds__(1024) norm_forward_shared(const xvk_norm_forward_args a) {
  __shared__ float scratch[3][kMaxWarpsPerBlock];
  extern __shared__ uint4 shared_row[];  // one name and type for every instantiation; 16-byte aligned
  norm_forward_streamed<T, VEC, true>(a, reinterpret_cast<Pack<T, VEC> *>(shared_row), scratch);
}

// Backward, register variants. partial (when dgamma/dbeta are wanted) gets
// one row of [2][cols] sums per warp (groups) or per block (G == 0).
template <class T, int VEC, int PACKS, int G, int ROWS>
__global__ void __launch_bounds__(register_kernel_max_threads(true, PACKS * VEC * ROWS))
    norm_backward_registers(const xvk_norm_backward_args a, float *partial) {
  __shared__ float scratch[2 * ROWS][kMaxWarpsPerBlock];
  constexpr bool kCache = kCacheAffine<PACKS, VEC>;
  const RowMapping<G, ROWS> map;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  float g[kCache ? PACKS : 1][VEC], unused[VEC];
  if constexpr (kCache) {
#pragma unroll
    for (int p = 0; p < PACKS; ++p)
      if (map.col(p, VEC) < a.cols)
        load_affine<T, VEC>(a.gamma, nullptr, f32, a.zero_centered_gamma, map.col(p, VEC), g[p], unused);
  }
  float acc_g[PACKS][VEC] = {}, acc_b[PACKS][VEC] = {};
  const float inv_cols = 1.0f / float(a.cols);
  for (int64_t base = map.first_warp_row; base < a.rows; base += map.row_step) {
    float xhat[ROWS][PACKS][VEC], dy[ROWS][PACKS][VEC], sums[2 * ROWS], rstd[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      const bool valid = row < a.rows;
      const float mean = valid && a.mean ? a.mean[row] : 0.0f;
      rstd[r] = valid ? a.rstd[row] : 0.0f;
      sums[2 * r] = sums[2 * r + 1] = 0.0f;
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = map.col(p, VEC);
        float gp[VEC];
        if (valid && col < a.cols) {
          load_vec<T, VEC>(static_cast<const T *>(a.dy.data) + row * a.dy.row_stride + col, dy[r][p]);
          load_vec<T, VEC>(static_cast<const T *>(a.x.data) + row * a.x.row_stride + col, xhat[r][p]);
          if constexpr (kCache) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) gp[i] = g[p][i];
          } else {
            load_affine<T, VEC>(a.gamma, nullptr, f32, a.zero_centered_gamma, col, gp, unused);
          }
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) dy[r][p][i] = xhat[r][p][i] = gp[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          xhat[r][p][i] = (xhat[r][p][i] - mean) * rstd[r];
          const float dyg = dy[r][p][i] * gp[i];
          sums[2 * r] += dyg;
          sums[2 * r + 1] += dyg * xhat[r][p][i];
          if (valid) {
            acc_g[p][i] += dy[r][p][i] * xhat[r][p][i];
            acc_b[p][i] += dy[r][p][i];
          }
          dy[r][p][i] = dyg;  // from here on dy holds dy * gamma
        }
      }
    }
    RowReducer<G>::all_reduce(sums, SumOp{}, scratch);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      if (row >= a.rows) continue;
      const float c1 = a.rms ? 0.0f : sums[2 * r] * inv_cols, c2 = sums[2 * r + 1] * inv_cols;
      T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = map.col(p, VEC);
        if (col >= a.cols) continue;
        float out[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = rstd[r] * (dy[r][p][i] - c1 - xhat[r][p][i] * c2);
        store_vec<T, VEC>(dx + col, out);
      }
    }
  }
  if (!partial) return;
  float *pg = partial + int64_t(blockIdx.x) * 2 * a.cols, *pb = pg + a.cols;
  if constexpr (G == 0) {
    // Each thread owns its columns: its sums are the block's.
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= a.cols) continue;
#pragma unroll
      for (int i = 0; i < VEC; ++i) pg[col + i] = acc_g[p][i], pb[col + i] = acc_b[p][i];
    }
  } else {
    // Groups hold the same columns: add them up across the lanes of a warp,
    // then across the warps of the block through shared memory (one pack of
    // G * VEC columns at a time), always in the same order.
    extern __shared__ float warp_sums[];  // [warps][G * VEC]
    const int warps = int(blockDim.x) / kWarpSize;
#pragma unroll
    for (int which = 0; which < 2; ++which) {
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        float v[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          v[i] = which == 0 ? acc_g[p][i] : acc_b[p][i];
#pragma unroll
          for (int offset = G; offset < kWarpSize; offset *= 2) v[i] += shfl_xor(v[i], offset, kWarpSize);
        }
        if (lane_id() < G) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) warp_sums[warp_id() * G * VEC + lane_id() * VEC + i] = v[i];
        }
        __syncthreads();
        for (int t = int(threadIdx.x); t < G * VEC; t += int(blockDim.x)) {
          const int col = p * G * VEC + t;  // element t % VEC of lane t / VEC's pack p
          float sum = 0.0f;
          for (int w = 0; w < warps; ++w) sum += warp_sums[w * G * VEC + t];
          if (col < a.cols) (which == 0 ? pg : pb)[col] = sum;
        }
        __syncthreads();
      }
    }
  }
}

// The streamed backward kernels' work on one vector of a row: its share of
// the row sums (of dy * g and of dy * g * xhat), then, from the row's c1 and
// c2, dx = rstd * (dy * g - c1 - xhat * c2), leaving xhat for dgamma.
template <class T, int VEC>
__device__ __forceinline__ void add_backward_sums(const xvk_norm_backward_args &a, int64_t col, const float (&xv)[VEC],
                                                  const float (&dyv)[VEC], float mean, float rstd, float (&sums)[2]) {
  float g[VEC], unused[VEC];
  load_affine<T, VEC>(a.gamma, nullptr, a.param_dtype == XVK_DTYPE_F32, a.zero_centered_gamma, col, g, unused);
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const float dyg = dyv[i] * g[i];
    sums[0] += dyg;
    sums[1] += dyg * (xv[i] - mean) * rstd;
  }
}
template <class T, int VEC>
__device__ __forceinline__ void backward_dx(const xvk_norm_backward_args &a, int64_t col, const float (&xv)[VEC],
                                            const float (&dyv)[VEC], float mean, float rstd, float c1, float c2,
                                            float (&xhat)[VEC], float (&dx)[VEC]) {
  float g[VEC], unused[VEC];
  load_affine<T, VEC>(a.gamma, nullptr, a.param_dtype == XVK_DTYPE_F32, a.zero_centered_gamma, col, g, unused);
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    xhat[i] = (xv[i] - mean) * rstd;
    dx[i] = rstd * (dyv[i] * g[i] - c1 - xhat[i] * c2);
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(1024) norm_backward_reread(const xvk_norm_backward_args a) {
  __shared__ float scratch[2][kMaxWarpsPerBlock];
  const int64_t step = int64_t(blockDim.x) * VEC;
  const float inv_cols = 1.0f / float(a.cols);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *x = static_cast<const T *>(a.x.data) + row * a.x.row_stride;
    const T *dy = static_cast<const T *>(a.dy.data) + row * a.dy.row_stride;
    const float mean = a.mean ? a.mean[row] : 0.0f, rstd = a.rstd[row];
    float sums[2] = {0.0f, 0.0f};
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < a.cols; col += step) {
      float xv[VEC], dyv[VEC];
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      add_backward_sums<T, VEC>(a, col, xv, dyv, mean, rstd, sums);
    }
    RowReducer<0>::all_reduce(sums, SumOp{}, scratch);
    const float c1 = a.rms ? 0.0f : sums[0] * inv_cols, c2 = sums[1] * inv_cols;
    T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < a.cols; col += step) {
      float xv[VEC], dyv[VEC], xhat[VEC], out[VEC];
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      backward_dx<T, VEC>(a, col, xv, dyv, mean, rstd, c1, c2, xhat, out);
      store_vec<T, VEC>(dx + col, out);
    }
  }
}

// Backward for rows too wide for the register variants whose dgamma/dbeta
// columns still fit: a block owns a row and reads it twice (the row sums,
// then dx; L2 may still hold it), and each thread keeps the dgamma/dbeta sums
// of its PACKS vectors of columns across rows, as the register variants do,
// so no column pass reads x and dy a third time. The dgamma sums stay in
// registers; the dbeta sums too, or, kBetaShared (reread_sums_beta_shared),
// in dynamic shared memory, one run of float4s per thread, so that twice the
// columns fit; each thread touches only its own, so no barrier guards them.
// partial gets one row of [2][cols] sums per block.
template <class T, int VEC, int PACKS, bool kBetaShared>
__global__ void __launch_bounds__(reread_sums_max_threads(PACKS * VEC, kBetaShared))
    norm_backward_reread_sums(const xvk_norm_backward_args a, float *partial) {
  __shared__ float scratch[2][kMaxWarpsPerBlock];
  extern __shared__ float4 beta_sums[];  // kBetaShared: [blockDim.x][kBetaRun]
  static_assert(!kBetaShared || PACKS * VEC % 4 == 0, "shared dbeta sums are kept as float4s");
  constexpr int kBetaRun = reread_sums_beta_run_floats(PACKS * VEC) / 4;  // float4s per thread
  const RowMapping<0, 1> map;
  const float inv_cols = 1.0f / float(a.cols);
  const bool want_beta = a.dbeta != nullptr;  // else its sums are written as 0, unread
  float acc_g[PACKS][VEC] = {}, acc_b[kBetaShared ? 1 : PACKS][VEC] = {};
  // kBetaShared: element e of this thread's columns (p * VEC + i) is
  // component e % 4 of float4 e / 4 of the thread's own run (padded: see
  // reread_sums_beta_run_floats), so each access is the thread's base plus a
  // constant.
  float4 *const my_beta_sums = beta_sums + int(threadIdx.x) * kBetaRun;
  auto beta_sum = [&](int e) -> float & {
    float4 &s = my_beta_sums[e / 4];
    return e % 4 == 0 ? s.x : e % 4 == 1 ? s.y : e % 4 == 2 ? s.z : s.w;
  };
  if constexpr (kBetaShared) {
#pragma unroll
    for (int e = 0; e < PACKS * VEC; ++e) beta_sum(e) = 0.0f;
  }
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *x = static_cast<const T *>(a.x.data) + row * a.x.row_stride;
    const T *dy = static_cast<const T *>(a.dy.data) + row * a.dy.row_stride;
    const float mean = a.mean ? a.mean[row] : 0.0f, rstd = a.rstd[row];
    // Loads are issued pack by pack: with the sums held in registers, all of
    // a row's packs at once would spill.
    float sums[2] = {0.0f, 0.0f};
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= a.cols) continue;
      float xv[VEC], dyv[VEC];
      load_pack<T, VEC>(x + col, xv);
      load_pack<T, VEC>(dy + col, dyv);
      add_backward_sums<T, VEC>(a, col, xv, dyv, mean, rstd, sums);
    }
    RowReducer<0>::all_reduce(sums, SumOp{}, scratch);
    const float c1 = a.rms ? 0.0f : sums[0] * inv_cols, c2 = sums[1] * inv_cols;
    T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= a.cols) continue;
      float xv[VEC], dyv[VEC], xhat[VEC], out[VEC];
      load_pack<T, VEC>(x + col, xv);
      load_pack<T, VEC>(dy + col, dyv);
      backward_dx<T, VEC>(a, col, xv, dyv, mean, rstd, c1, c2, xhat, out);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        acc_g[p][i] += dyv[i] * xhat[i];
        if constexpr (kBetaShared) {
          if (want_beta) beta_sum(p * VEC + i) += dyv[i];
        } else {
          acc_b[p][i] += dyv[i];
        }
      }
      store_vec<T, VEC>(dx + col, out);
    }
  }
  if (!partial) return;
  float *pg = partial + int64_t(blockIdx.x) * 2 * a.cols, *pb = pg + a.cols;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int col = map.col(p, VEC);
    if (col >= a.cols) continue;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      pg[col + i] = acc_g[p][i];
      if constexpr (kBetaShared) {
        pb[col + i] = want_beta ? beta_sum(p * VEC + i) : 0.0f;
      } else {
        pb[col + i] = acc_b[p][i];
      }
    }
  }
}

// dgamma/dbeta partials for rows too wide for the register variants: block
// (x, y) sums columns [x * blockDim.x * VEC, ...) over row chunk y.
template <class T, int VEC>
__global__ void __launch_bounds__(256) norm_param_grad_columns(const xvk_norm_backward_args a, float *partial,
                                                              int64_t rows_per_chunk) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (col >= a.cols) return;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < a.rows ? begin + rows_per_chunk : a.rows;
  float acc_g[VEC] = {}, acc_b[VEC] = {};
  for (int64_t row = begin; row < end; ++row) {
    float xv[VEC], dyv[VEC];
    load_vec<T, VEC>(static_cast<const T *>(a.x.data) + row * a.x.row_stride + col, xv);
    load_vec<T, VEC>(static_cast<const T *>(a.dy.data) + row * a.dy.row_stride + col, dyv);
    const float mean = a.mean ? a.mean[row] : 0.0f, rstd = a.rstd[row];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      acc_g[i] += dyv[i] * (xv[i] - mean) * rstd;
      acc_b[i] += dyv[i];
    }
  }
  float *pg = partial + int64_t(blockIdx.y) * 2 * a.cols, *pb = pg + a.cols;
#pragma unroll
  for (int i = 0; i < VEC; ++i) pg[col + i] = acc_g[i], pb[col + i] = acc_b[i];
}

// dgamma[c] = sum over parts of partial[part][0][c] (dbeta: [1]). Lane y of
// kFinalizeLanes sums parts y, y + lanes, ... with four interleaved
// accumulators (loads in flight), then lanes are added in order: a fixed
// order, whatever the timing.
constexpr int kFinalizeLanes = 32;
template <class P>
__global__ void __launch_bounds__(32 * kFinalizeLanes)
    norm_backward_finalize(const float *partial, int64_t parts, int64_t cols, P *dgamma, P *dbeta) {
  __shared__ float sums[2][kFinalizeLanes][33];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float sg[4] = {}, sb[4] = {};
  if (col < cols) {
    int64_t part = threadIdx.y;
    for (; part + 3 * kFinalizeLanes < parts; part += 4 * kFinalizeLanes)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float *row = partial + (part + k * kFinalizeLanes) * 2 * cols;
        sg[k] += row[col];
        sb[k] += row[cols + col];
      }
    for (; part < parts; part += kFinalizeLanes) sg[0] += partial[part * 2 * cols + col], sb[0] += partial[part * 2 * cols + cols + col];
  }
  sums[0][threadIdx.y][threadIdx.x] = (sg[0] + sg[1]) + (sg[2] + sg[3]);
  sums[1][threadIdx.y][threadIdx.x] = (sb[0] + sb[1]) + (sb[2] + sb[3]);
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  float g = 0.0f, b = 0.0f;
  for (int k = 0; k < kFinalizeLanes; ++k) g += sums[0][k][threadIdx.x], b += sums[1][k][threadIdx.x];
  if (dgamma) dgamma[col] = from_float<P>(g);
  if (dbeta) dbeta[col] = from_float<P>(b);
}

template <class T, int VEC>
xvk_status_t forward(Context &ctx, const Config &c, const xvk_norm_forward_args &a) {
  xvk_status_t status = XVK_ERROR_INTERNAL;
  switch (c.variant) {
    case Variant::kGroup:
      with_group_shape(c.group, c.packs, c.rows, [&](auto g, auto packs, auto rows) {
        constexpr int G = decltype(g)::value, P = decltype(packs)::value, R = decltype(rows)::value;
        status = launch_rows(ctx, c, norm_forward_registers<T, VEC, P, G, R>, "norm_forward_registers", a.rows,
                             int64_t(c.threads / G) * R, a);
      });
      break;
    case Variant::kBlock:
      with_block_packs(c.packs, [&](auto packs) {
        status = launch_rows(ctx, c, norm_forward_registers<T, VEC, decltype(packs)::value, 0, 1>, "norm_forward_registers", a.rows, 1, a);
      });
      break;
    case Variant::kReread:
      status = launch_rows(ctx, c, norm_forward_reread<T, VEC>, "norm_forward_reread", a.rows, 1, a);
      break;
    case Variant::kShared:
      status = launch_rows_smem(ctx, c, norm_forward_shared<T, VEC>, "norm_forward_shared", a.rows, 1,
                                size_t(shared_bytes(OpKind::kNormForward, a.cols, VEC, sizeof(T))), a);
      break;
    case Variant::kRereadSums:  // the backward's (complete_config)
    case Variant::kSharedDy:    // the softmax backward's (complete_config)
      break;
  }
  return status;
}

xvk_status_t finalize(Context &ctx, const xvk_norm_backward_args &a, const float *partial, int64_t parts) {
  const dim3 block(32, kFinalizeLanes);
  const int blocks = int(ceil_div(a.cols, 32));
  with_dtype(a.dparam_dtype, [&](auto tag) {
    using P = decltype(tag);
    norm_backward_finalize<P><<<blocks, block, 0, ctx.stream>>>(partial, parts, a.cols, static_cast<P *>(a.dgamma),
                                                                static_cast<P *>(a.dbeta));
  });
  return check_launch("norm_backward_finalize");
}

template <class T, int VEC>
xvk_status_t backward(Context &ctx, const Config &c, const xvk_norm_backward_args &a) {
  const bool want_params = a.dgamma || a.dbeta;
  xvk_status_t status = XVK_ERROR_INTERNAL;
  if (c.variant == Variant::kReread) {
    if (a.rows > 0) {
      status = launch_rows(ctx, c, norm_backward_reread<T, VEC>, "norm_backward_reread", a.rows, 1, a);
      if (status != XVK_SUCCESS || !want_params) return status;
    }
    // Column sums over row chunks: enough blocks to fill the device.
    const int threads = 256;
    const int64_t col_blocks = ceil_div(ceil_div(a.cols, VEC), threads);
    const int64_t chunks = a.rows == 0 ? 1 : std::min<int64_t>(a.rows, std::max<int64_t>(1, 4 * ctx.info->sm_count / col_blocks));
    const int64_t rows_per_chunk = a.rows == 0 ? 1 : ceil_div(a.rows, chunks);
    const int64_t parts = a.rows == 0 ? 1 : ceil_div(a.rows, rows_per_chunk);
    void *partial = nullptr;
    if (ctx.workspace(size_t(parts) * 2 * size_t(a.cols) * sizeof(float), &partial) != kSuccess)
      return XVK_ERROR_OUT_OF_MEMORY;
    norm_param_grad_columns<T, VEC><<<dim3(unsigned(col_blocks), unsigned(parts)), threads, 0, ctx.stream>>>(
        a, static_cast<float *>(partial), rows_per_chunk);
    status = check_launch("norm_param_grad_columns");
    return status == XVK_SUCCESS ? finalize(ctx, a, static_cast<const float *>(partial), parts) : status;
  }
  // smem: the group variants' cross-warp sums of one pack of columns.
  auto launch = [&](auto kernel, const char *name, int64_t rows_per_block, size_t smem) {
    const int resident = ctx.blocks_per_sm(kernel, c.threads, smem);
    const int blocks = grid_blocks(ctx, ceil_div(a.rows, rows_per_block), resident, c.blocks_per_sm);
    float *partial = nullptr;
    const int64_t parts = blocks;
    if (want_params) {
      void *p = nullptr;
      if (ctx.workspace(size_t(parts) * 2 * size_t(a.cols) * sizeof(float), &p) != kSuccess) {
        status = XVK_ERROR_OUT_OF_MEMORY;
        return;
      }
      partial = static_cast<float *>(p);
    }
    kernel<<<blocks, c.threads, smem, ctx.stream>>>(a, partial);
    status = check_launch(name);
    if (status == XVK_SUCCESS && want_params) status = finalize(ctx, a, partial, parts);
  };
  if (c.variant == Variant::kGroup) {
    with_group_shape(c.group, c.packs, c.rows, [&](auto g, auto packs, auto rows) {
      constexpr int G = decltype(g)::value, P = decltype(packs)::value, R = decltype(rows)::value;
      launch(norm_backward_registers<T, VEC, P, G, R>, "norm_backward_registers", int64_t(c.threads / G) * R,
             want_params ? size_t(c.threads / ctx.info->warp_size) * G * VEC * sizeof(float) : 0);
    });
  } else if (c.variant == Variant::kBlock) {
    with_block_packs(c.packs, [&](auto packs) {
      launch(norm_backward_registers<T, VEC, decltype(packs)::value, 0, 1>, "norm_backward_registers", 1, 0);
    });
  } else if (c.variant == Variant::kRereadSums) {
    const size_t smem = size_t(config_shared_bytes(OpKind::kNormBackward, c, a.cols, sizeof(T)));
    with_reread_sums_packs(c.packs, [&](auto packs) {
      constexpr int P = decltype(packs)::value, kElems = P * VEC;
      if constexpr (kElems <= kMaxRereadSumsElems) {
        if (smem == 0) {
          if constexpr (reread_sums_registers_max_threads(kElems) > 0)
            launch(norm_backward_reread_sums<T, VEC, P, false>, "norm_backward_reread_sums", 1, 0);
        } else if constexpr (kElems % 4 == 0) {
          launch(norm_backward_reread_sums<T, VEC, P, true>, "norm_backward_reread_sums", 1, smem);
        }
      }
    });
  }
  return status;
}

// Parameter vectors are read VEC at a time too: in 16-byte pieces.
bool params_aligned(const void *p) { return !p || aligned_to(p, kVectorBytes); }

}  // namespace

int norm_forward_vec(const xvk_norm_forward_args &a) {
  const int64_t es = element_size(a.dtype), vec = kVectorBytes / es;
  const bool ok = a.cols % vec == 0 && rows_aligned(a.x, kVectorBytes, es) && rows_aligned(a.y, kVectorBytes, es) &&
                  rows_aligned(a.residual, kVectorBytes, es) && rows_aligned(a.residual_out, kVectorBytes, es) &&
                  params_aligned(a.gamma) && params_aligned(a.beta);
  return ok ? int(vec) : 1;
}

xvk_status_t norm_forward(Context &ctx, const xvk_norm_forward_args &a, const Config *forced) {
  const int vec = norm_forward_vec(a);
  const Config c = config_for(ctx, forced, OpKind::kNormForward, a, vec);
  return launch_typed(a.dtype, c.vec,
                      [&](auto tag, auto v) { return forward<decltype(tag), decltype(v)::value>(ctx, c, a); });
}

xvk_status_t norm_backward(Context &ctx, const xvk_norm_backward_args &a, const Config *forced) {
  const int64_t es = element_size(a.dtype), v = kVectorBytes / es;
  const bool ok = a.cols % v == 0 && rows_aligned(a.x, kVectorBytes, es) && rows_aligned(a.dy, kVectorBytes, es) &&
                  rows_aligned(a.dx, kVectorBytes, es) && params_aligned(a.gamma);
  const int vec = ok ? int(v) : 1;
  const Config c = config_for(ctx, forced, OpKind::kNormBackward, a, vec);
  return launch_typed(a.dtype, c.vec,
                      [&](auto tag, auto vv) { return backward<decltype(tag), decltype(vv)::value>(ctx, c, a); });
}

}  // namespace xvk::gpu
