// softmax and log_softmax over the last dimension, forward and backward.
//
// Variants (chosen per call by the tuning table, see tuning/tuning.hpp):
//  - registers: a group of G lanes (or the whole block, G == 0) holds a row
//    in registers; one read, one write, reductions by shuffles (and shared
//    memory across warps when the block owns the row);
//  - shared: a block reads a row once into shared memory, keeping an online
//    (max, sum) pair, and writes the output from there, for rows too wide
//    for registers;
//  - reread: the same, reading the row from memory twice, for rows too wide
//    for shared memory too.
// The backward has the same three; its shared variant keeps y's and dy's rows,
// or dy's alone (shared-dy) where the pair does not fit.
// Scale, the broadcast additive mask and the causal mask are applied as the
// logits are loaded (load_logits), so they cost no extra pass.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/launch.cuh"

namespace xvk::gpu {
namespace {

constexpr float kNegInf = -__builtin_huge_valf();

__device__ __forceinline__ int64_t mask_offset(const xvk_softmax_forward_args &a, int64_t r) {
  int64_t offset = 0;
  for (int k = 0; k < a.mask_ndim; ++k) {
    offset += (r % a.mask_shape[k]) * a.mask_stride[k];
    r /= a.mask_shape[k];
  }
  return offset;
}

// Columns [0, limit) of row r survive the causal mask.
__device__ __forceinline__ int64_t causal_limit(const xvk_softmax_forward_args &a, int64_t r) {
  if (a.causal == XVK_CAUSAL_NONE) return a.cols;
  const int64_t q = r % a.causal_rows;
  const int64_t limit = q + 1 + (a.causal == XVK_CAUSAL_BOTTOM_RIGHT ? a.cols - a.causal_rows : 0);
  return limit < 0 ? 0 : limit;
}

// Whether a call has an additive or a causal mask. The register kernels of
// the vector path are compiled without the mask paths too (kMasked false,
// kHasLeanForward): the mask pointer and causal limit of each row held 8-24
// registers there (ptxas sm_90, fp32 groups: 34-58 -> 24-32), which capped
// the narrow rows' occupancy.
inline bool has_mask(const xvk_softmax_forward_args &a) { return a.mask || a.causal != XVK_CAUSAL_NONE; }

// The logits of one row as the softmax sees them; kMasked false: a call
// without masks (has_mask), every column kept.
template <class T, bool kMasked = true>
struct LogitsRow {
  const T *x = nullptr;
  const T *mask = nullptr;
  int64_t limit = 0;  // 0 for a row past the end: everything masked

  LogitsRow() = default;
  __device__ __forceinline__ LogitsRow(const xvk_softmax_forward_args &a, int64_t row, bool valid) {
    if (!valid) return;
    x = static_cast<const T *>(a.x.data) + row * a.x.row_stride;
    if constexpr (kMasked) {
      if (a.mask) mask = static_cast<const T *>(a.mask) + mask_offset(a, row);
      limit = causal_limit(a, row);
    } else {
      limit = a.cols;
    }
  }
  // z = scale * x + mask for columns col .. col + VEC - 1, -inf where
  // masked, with x read from the row.
  template <int VEC>
  __device__ __forceinline__ void load(const xvk_softmax_forward_args &a, int64_t col, float (&z)[VEC]) const {
    if (col >= limit) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) z[i] = kNegInf;
      return;
    }
    apply(a, col, load_global(reinterpret_cast<const Pack<T, VEC> *>(x + col)), z);
  }
  // The same from x's values already loaded (xv). Only the vector that the
  // causal limit cuts is tested element by element. Without masks (the
  // vector path: cols % VEC == 0, so the limit, cols, never cuts a vector)
  // no branch: a branch here let ptxas move each of a lane's x loads into
  // it, after the one before had been used (sm_90), so they waited for one
  // another.
  template <int VEC>
  __device__ __forceinline__ void apply(const xvk_softmax_forward_args &a, int64_t col, const Pack<T, VEC> &xv,
                                        float (&z)[VEC]) const {
    if constexpr (!kMasked) {
      unpack(xv, z);
      const bool in = col < limit;
#pragma unroll
      for (int i = 0; i < VEC; ++i) z[i] = in ? z[i] * a.scale : kNegInf;
      return;
    }
    if (col >= limit) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) z[i] = kNegInf;
      return;
    }
    unpack(xv, z);
    if (kMasked && mask) {
      float m[VEC];
      load_vec<T, VEC>(mask + col, m);
#pragma unroll
      for (int i = 0; i < VEC; ++i) z[i] = z[i] * a.scale + m[i];
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) z[i] *= a.scale;
    }
    // Tested as i < limit - col rather than col + i < limit: the same test,
    // but hipcc (ROCm 5.2) hoisted every 64-bit col + i out of the row loop
    // and spilled them to scratch in the widest register kernels.
    const int64_t left = limit - col;
    if (left < VEC) {
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        if (i >= left) z[i] = kNegInf;
    }
  }
};

constexpr float kLog2e = 1.4426950408889634f;

// Per-row constants of the output, from the row's max and its sum of
// exponentials of z - shift. A fully masked row (max -inf) is shifted by 0,
// so its exponentials are 0 rather than NaN, and its outputs are 0 (softmax)
// or -inf (log-softmax).
__device__ __forceinline__ float exp_shift(float max) { return max == kNegInf ? 0.0f : max; }
// softmax: y = exp(z - shift) * k; log-softmax: y = (z - shift) - k.
template <bool kLog>
__device__ __forceinline__ float output_constant(float max, float sum) {
  if (max == kNegInf) return 0.0f;
  return kLog ? __logf(sum) : 1.0f / sum;
}

// Softmax keeps each element's exponential for the output; log-softmax keeps
// z - shift, the exponential only feeding the sum.
// kAhead (kHasL2RowAhead shapes, a row per block): each block asks L2 for
// its next row once the current row's loads are done.
template <bool kLog, bool kMasked, class T, int VEC, int PACKS, int G, int ROWS, bool kAhead = false>
__global__ void __launch_bounds__(register_kernel_max_threads(false, PACKS * VEC * ROWS)) softmax_forward_registers(const xvk_softmax_forward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  static_assert(!kAhead || (G == 0 && ROWS == 1), "kAhead: a row per block");
  __shared__ float scratch[ROWS][kMaxWarpsPerBlock];
  const RowMapping<G, ROWS> map;
  // Lanes of up to 16 elements issue all their loads of x before using any
  // (issue_row), so that they are in flight together; loaded pack by pack,
  // each waited out the one before (sm_90 SASS). Wider lanes keep per-pack
  // loads: holding the raw packs beside the floats made them spill. (16-bit
  // lanes of 64 elements holding only the raw packs, converted again in each
  // pass, for two 512-thread blocks per SM: spilled 200-376 bytes under 64
  // registers and ran 2x slower at 32768 columns; session 45's trials.)
  constexpr bool kIssueFirst = PACKS * VEC * ROWS <= 16;
  for (int64_t base = map.first_warp_row; base < a.rows; base += map.row_step) {
    float z[ROWS][PACKS][VEC];
    float max[ROWS];
    LogitsRow<T, kMasked> logits[ROWS];
    Pack<T, VEC> raw[kIssueFirst ? ROWS : 1][PACKS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      logits[r] = LogitsRow<T, kMasked>(a, row, row < a.rows);
      // Vectors past the causal limit are not read.
      if constexpr (kIssueFirst)
        issue_row(map, logits[r].x, row < a.rows, int(logits[r].limit < a.cols ? logits[r].limit : a.cols), raw[r]);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      max[r] = kNegInf;
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = map.col(p, VEC);
        if constexpr (kIssueFirst && !kMasked) {
          logits[r].apply(a, col, raw[r][p], z[r][p]);  // -inf past the row's end, without a branch
        } else if (col < a.cols) {
          if constexpr (kIssueFirst)
            logits[r].apply(a, col, raw[r][p], z[r][p]);
          else
            logits[r].load(a, col, z[r][p]);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) z[r][p][i] = kNegInf;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) max[r] = max_nan(max[r], z[r][p][i]);
      }
    }
    RowReducer<G>::all_reduce(max, MaxOp{}, scratch);
    if constexpr (kAhead) {
      const int64_t next = base + map.row_step;
      prefetch_row_l2<T, VEC, PACKS>(map, static_cast<const T *>(a.x.data) + next * a.x.row_stride, next < a.rows, a.cols);
    }
    float sum[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float shift = exp_shift(max[r]);
      sum[r] = 0.0f;
#pragma unroll
      for (int p = 0; p < PACKS; ++p)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float d = z[r][p][i] - shift;
          const float e = exp2_fast(d * kLog2e);
          sum[r] += e;
          z[r][p][i] = kLog ? d : e;
        }
    }
    RowReducer<G>::all_reduce(sum, SumOp{}, scratch);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      if (row >= a.rows) continue;
      T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
      const float k = output_constant<kLog>(max[r], sum[r]);
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = map.col(p, VEC);
        if (col >= a.cols) continue;
        float out[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = kLog ? z[r][p][i] - k : z[r][p][i] * k;
        store_vec<T, VEC>(y + col, out);
      }
    }
  }
}

// Vectors a thread of the streaming kernels loads before it uses any, so
// that they are in flight together.
constexpr int kIssue = 4;

// The streamed kernels' pass 1: a thread's running max of the logits it has
// seen and sum of their exponentials below it (rescaled whenever the max
// grows), then the row's pair over the block.
struct OnlineMaxSum {
  float max = kNegInf, sum = 0.0f;

  template <int VEC>
  __device__ __forceinline__ void add(const float (&z)[VEC]) {
    float new_max = max;
#pragma unroll
    for (int i = 0; i < VEC; ++i) new_max = max_nan(new_max, z[i]);
    if (new_max == kNegInf) return;
    sum *= exp2_fast((max - new_max) * kLog2e);
#pragma unroll
    for (int i = 0; i < VEC; ++i) sum += exp2_fast((z[i] - new_max) * kLog2e);
    max = new_max;
  }
  // The row's max and sum: every thread of the block calls it.
  template <int M>
  __device__ __forceinline__ void reduce_block(float (&scratch)[M][kMaxWarpsPerBlock], float &row_max, float &row_sum) const {
    float m[1] = {max};
    RowReducer<0>::all_reduce(m, MaxOp{}, scratch);
    float s[1] = {max == kNegInf ? 0.0f : sum * exp2_fast((max - m[0]) * kLog2e)};
    RowReducer<0>::all_reduce(s, SumOp{}, scratch);
    row_max = m[0], row_sum = s[0];
  }
};

// A block streams each of its rows: pass 1 reads the row once, keeping an
// online (max, sum) pair (the sum is rescaled whenever the max grows); pass 2
// writes the output from the row read again from memory (reread, where L2
// may still hold it) or from the copy pass 1 left in shared memory (kStaged).
// Each thread stages and reads back only its own vectors, so the staging
// needs no barrier of its own. Vectors past the causal limit are never read.
template <bool kLog, class T, int VEC, bool kStaged, int M>
__device__ __forceinline__ void softmax_forward_streamed(const xvk_softmax_forward_args &a, Pack<T, VEC> *staged,
                                                         float (&scratch)[M][kMaxWarpsPerBlock]) {
  using P = Pack<T, VEC>;
  const int64_t vectors = a.cols / VEC;  // VEC divides cols on the vector path
  const int64_t stride = blockDim.x;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const LogitsRow<T> logits(a, row, true);
    const P *x = reinterpret_cast<const P *>(logits.x);
    const int64_t live = (logits.limit + VEC - 1) / VEC;  // vectors with a column the causal mask keeps
    OnlineMaxSum pair;
    for (int64_t v0 = threadIdx.x; v0 < live; v0 += kIssue * stride) {
      P raw[kIssue];
#pragma unroll
      for (int u = 0; u < kIssue; ++u)
        if (v0 + u * stride < live) raw[u] = load_global(x + v0 + u * stride);
#pragma unroll
      for (int u = 0; u < kIssue; ++u) {
        const int64_t v = v0 + u * stride;
        if (v >= live) break;
        if constexpr (kStaged) staged[v] = raw[u];
        float z[VEC];
        logits.apply(a, v * VEC, raw[u], z);
        pair.add(z);
      }
    }
    float row_max, row_sum;
    pair.reduce_block(scratch, row_max, row_sum);
    const float shift = exp_shift(row_max), k = output_constant<kLog>(row_max, row_sum);
    T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
    for (int64_t v = threadIdx.x; v < vectors; v += stride) {
      float z[VEC];
      if (v >= live)
        logits.apply(a, v * VEC, P{}, z);  // all masked
      else
        logits.apply(a, v * VEC, kStaged ? staged[v] : load_global(x + v), z);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float d = z[i] - shift;
        z[i] = kLog ? d - k : exp2_fast(d * kLog2e) * k;
      }
      store_vec<T, VEC>(y + v * VEC, z);
    }
  }
}

template <bool kLog, class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads) softmax_forward_reread(const xvk_softmax_forward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  softmax_forward_streamed<kLog, T, VEC, false>(a, nullptr, scratch);
}

// The row in shared memory: launched with shared_bytes(kSoftmaxForward, cols) of it.
template <bool kLog, class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads) softmax_forward_shared(const xvk_softmax_forward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  extern __shared__ uint4 shared_row[];  // one name and type for every instantiation; 16-byte aligned
  softmax_forward_streamed<kLog, T, VEC, true>(a, reinterpret_cast<Pack<T, VEC> *>(shared_row), scratch);
}

// kRing (tuning.hpp): the block's rows pass through a ring of `slots` chunk
// slots in shared memory. Each thread copies its own vectors of each chunk
// (PACKS of them, threads apart) with asynchronous copies and reads back only
// those, so the ring needs no barrier: a thread waits for its own copies
// alone. The ring starts full; as the output pass finishes with a chunk, the
// thread copies the chunk `slots` ahead into its slot, so at the start of each
// row `slots - chunks` chunks are in flight behind the row's own. The passes
// over the row are those of softmax_forward_streamed (OnlineMaxSum, then the output).
template <bool kLog, class T, int VEC, int PACKS>
__global__ void __launch_bounds__(kMaxThreads) softmax_forward_ring(const xvk_softmax_forward_args a, int slots) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  extern __shared__ uint4 shared_row[];  // the slots, chunk after chunk
  using P = Pack<T, VEC>;
  P *const ring = reinterpret_cast<P *>(shared_row) + threadIdx.x;  // this thread's first vector of slot 0
  const int64_t vectors = a.cols / VEC;  // VEC divides cols (complete_config: 16-byte vectors)
  const int stride = blockDim.x, chunk_vectors = stride * PACKS;
  const int chunks = int(ring_chunks(vectors, stride, PACKS));
  // The next chunk to copy: of row copy_row, chunk copy_part, into slot copy_slot.
  int64_t copy_row = blockIdx.x;
  int copy_part = 0, copy_slot = 0;
  auto copy_next = [&] {
    if (copy_row < a.rows) {
      const P *x = reinterpret_cast<const P *>(static_cast<const T *>(a.x.data) + copy_row * a.x.row_stride);
      const int64_t first = int64_t(copy_part) * chunk_vectors + threadIdx.x;
      const int64_t live = (causal_limit(a, copy_row) + VEC - 1) / VEC;  // none past the causal limit
#pragma unroll
      for (int k = 0; k < PACKS; ++k)
        if (first + k * stride < live)
          copy_async_16(ring + copy_slot * chunk_vectors + k * stride, x + first + k * stride);
    }
    async_copies_commit();  // a group per chunk, empty past the last row: the waits count chunks
    if (++copy_part == chunks) copy_part = 0, copy_row += gridDim.x;
    if (++copy_slot == slots) copy_slot = 0;
  };
  for (int s = 0; s < slots; ++s) copy_next();
  int first_slot = 0;  // the current row's first chunk
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    async_copies_wait(slots - chunks);  // this row's chunks have landed
    const LogitsRow<T> logits(a, row, true);
    const int64_t live = (logits.limit + VEC - 1) / VEC;  // vectors with a column the causal mask keeps
    OnlineMaxSum pair;
    for (int part = 0, slot = first_slot; part < chunks; ++part, slot = slot + 1 == slots ? 0 : slot + 1) {
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        const int64_t v = int64_t(part) * chunk_vectors + k * stride + threadIdx.x;
        if (v >= live) break;
        float z[VEC];
        logits.apply(a, v * VEC, ring[slot * chunk_vectors + k * stride], z);
        pair.add(z);
      }
    }
    float row_max, row_sum;
    pair.reduce_block(scratch, row_max, row_sum);
    const float shift = exp_shift(row_max), k_out = output_constant<kLog>(row_max, row_sum);
    T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
    for (int part = 0; part < chunks; ++part) {
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        const int64_t v = int64_t(part) * chunk_vectors + k * stride + threadIdx.x;
        if (v >= vectors) break;
        float z[VEC];
        logits.apply(a, v * VEC, v < live ? ring[first_slot * chunk_vectors + k * stride] : P{}, z);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float d = z[i] - shift;
          z[i] = kLog ? d - k_out : exp2_fast(d * kLog2e) * k_out;
        }
        store_vec<T, VEC>(y + v * VEC, z);
      }
      copy_next();  // into first_slot, which this thread has read for the last time
      if (++first_slot == slots) first_slot = 0;
    }
  }
  async_copies_wait<0>();  // (only empty groups can be left: rows past the last)
}

// The backward's dx from y, dy and the row's sum acc (of dy, log-softmax, or
// of dy * y, softmax).
template <bool kLog, int VEC>
__device__ __forceinline__ void softmax_dx(float scale, const float (&y)[VEC], const float (&dy)[VEC], float acc,
                                           float (&dx)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) dx[i] = scale * (kLog ? dy[i] - __expf(y[i]) * acc : y[i] * (dy[i] - acc));
}
template <int VEC>
__device__ __forceinline__ void softmax_dx(const xvk_softmax_backward_args &a, const float (&y)[VEC],
                                           const float (&dy)[VEC], float acc, float (&dx)[VEC]) {
  if (a.log)
    softmax_dx<true>(a.scale, y, dy, acc, dx);
  else
    softmax_dx<false>(a.scale, y, dy, acc, dx);
}

template <class T, int VEC, int PACKS, int G, int ROWS>
__global__ void __launch_bounds__(register_kernel_max_threads(true, PACKS * VEC * ROWS)) softmax_backward_registers(const xvk_softmax_backward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[ROWS][kMaxWarpsPerBlock];
  const RowMapping<G, ROWS> map;
  for (int64_t base = map.first_warp_row; base < a.rows; base += map.row_step) {
    float y[ROWS][PACKS][VEC], dy[ROWS][PACKS][VEC], acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      const bool valid = row < a.rows;
      acc[r] = 0.0f;
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = map.col(p, VEC);
        if (valid && col < a.cols) {
          load_vec<T, VEC>(static_cast<const T *>(a.y.data) + row * a.y.row_stride + col, y[r][p]);
          load_vec<T, VEC>(static_cast<const T *>(a.dy.data) + row * a.dy.row_stride + col, dy[r][p]);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) y[r][p][i] = dy[r][p][i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[r] += a.log ? dy[r][p][i] : dy[r][p][i] * y[r][p][i];
      }
    }
    RowReducer<G>::all_reduce(acc, SumOp{}, scratch);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      if (row >= a.rows) continue;
      T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const int col = map.col(p, VEC);
        if (col >= a.cols) continue;
        float out[VEC];
        softmax_dx(a, y[r][p], dy[r][p], acc[r], out);
        store_vec<T, VEC>(dx + col, out);
      }
    }
  }
}

// What the backward's streamed kernels keep in shared memory between their
// passes: nothing (reread), dy's row (kSharedDy), or y's and dy's (kShared).
enum class Staged { kNone, kDy, kBoth };

// The backward's streamed form, like the forward's: pass 1 reads y and dy
// (kIssue vectors of each in flight per thread) for the row's sum; pass 2
// reads them again from memory or from the copies pass 1 left in shared
// memory (dy's row, then, kBoth, y's). Log-softmax's sum needs no y, so
// unless y is staged, its pass 1 reads dy alone and y is read once.
template <class T, int VEC, Staged kStaged, int M>
__device__ __forceinline__ void softmax_backward_streamed(const xvk_softmax_backward_args &a, Pack<T, VEC> *staged,
                                                          float (&scratch)[M][kMaxWarpsPerBlock]) {
  using P = Pack<T, VEC>;
  constexpr bool kStageDy = kStaged != Staged::kNone, kStageY = kStaged == Staged::kBoth;
  const int64_t vectors = a.cols / VEC;  // VEC divides cols on the vector path
  const int64_t stride = blockDim.x;
  P *staged_dy = staged, *staged_y = staged + vectors;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const P *y = reinterpret_cast<const P *>(static_cast<const T *>(a.y.data) + row * a.y.row_stride);
    const P *dy = reinterpret_cast<const P *>(static_cast<const T *>(a.dy.data) + row * a.dy.row_stride);
    float acc[1] = {0.0f};
    const bool read_y = kStageY || !a.log;
    for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += kIssue * stride) {
      P raw_y[kIssue] = {}, raw_dy[kIssue];
#pragma unroll
      for (int u = 0; u < kIssue; ++u)
        if (v0 + u * stride < vectors) {
          if (read_y) raw_y[u] = load_global(y + v0 + u * stride);
          raw_dy[u] = load_global(dy + v0 + u * stride);
        }
#pragma unroll
      for (int u = 0; u < kIssue; ++u) {
        const int64_t v = v0 + u * stride;
        if (v >= vectors) continue;  // not break: hipcc leaves a loop with a break un-unrolled
        if constexpr (kStageDy) staged_dy[v] = raw_dy[u];
        if constexpr (kStageY) staged_y[v] = raw_y[u];
        float yv[VEC], dyv[VEC];
        unpack(raw_y[u], yv);
        unpack(raw_dy[u], dyv);
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[0] += a.log ? dyv[i] : dyv[i] * yv[i];
      }
    }
    RowReducer<0>::all_reduce(acc, SumOp{}, scratch);
    T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
    // Pass 2 issues kIssueDx vectors of each input it reads from memory at
    // once too: one load at a time would wait out its latency. With both
    // from memory (reread), fewer than pass 1: with dx's values live too, 4
    // spilled at the 64-register bound of 1024 threads, and so did 2 of fp16
    // (whose conversions take more registers than bfloat16's shifts; H200:
    // fp16 shared-dy 32768 went 2508 -> 2776 us). A staged dy is read from
    // shared memory where it is used, holding no registers while y's loads
    // are in flight, so those issue kIssue at once (H200, fp16 log-softmax
    // 49152 x 16384: one y load at a time kept it at 1.11x the copy time).
    // The log/plain choice is made once per row, outside the loop, to keep
    // registers down too.
    constexpr int kIssueDx = kStageDy ? kIssue : std::is_same_v<T, half> ? 1 : 2;
    auto write_dx = [&](auto log) {
      for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += kIssueDx * stride) {
        P raw_y[kIssueDx];
        [[maybe_unused]] P raw_dy[kStageDy ? 1 : kIssueDx];  // unused when dy is staged
#pragma unroll
        for (int u = 0; u < kIssueDx; ++u) {
          const int64_t v = v0 + u * stride;
          if (v < vectors) {
            raw_y[u] = kStageY ? staged_y[v] : load_global(y + v);
            if constexpr (!kStageDy) raw_dy[u] = load_global(dy + v);
          }
        }
#pragma unroll
        for (int u = 0; u < kIssueDx; ++u) {
          const int64_t v = v0 + u * stride;
          if (v >= vectors) continue;
          float yv[VEC], dyv[VEC], out[VEC];
          unpack(raw_y[u], yv);
          if constexpr (kStageDy)
            unpack(staged_dy[v], dyv);
          else
            unpack(raw_dy[u], dyv);
          softmax_dx<decltype(log)::value>(a.scale, yv, dyv, acc[0], out);
          store_vec<T, VEC>(dx + v * VEC, out);
        }
      }
    };
    if (a.log)
      write_dx(std::true_type{});
    else
      write_dx(std::false_type{});
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads) softmax_backward_reread(const xvk_softmax_backward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  softmax_backward_streamed<T, VEC, Staged::kNone>(a, nullptr, scratch);
}

// Rows in shared memory (kStaged: dy's, or dy's and y's), launched with
// config_shared_bytes of it.
template <class T, int VEC, Staged kStaged>
__global__ void __launch_bounds__(kMaxThreads) softmax_backward_shared(const xvk_softmax_backward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[1][kMaxWarpsPerBlock];
  extern __shared__ uint4 shared_row[];
  softmax_backward_streamed<T, VEC, kStaged>(a, reinterpret_cast<Pack<T, VEC> *>(shared_row), scratch);
}

// Whether a register kernel shape also has a build without the mask paths:
// the vector path only (the scalar path keeps one kernel per shape, to bound
// the instantiations). The float32 block kernels ran up to 40% slower that
// way on the H200 until LogitsRow::apply lost its branches without masks:
// ptxas had moved each of a lane's x loads into the branch that used it, so
// the loads waited for one another (sm_90 SASS: 2 or 4 loads with branches
// between them, against back to back in the masked build).
template <int VEC>
constexpr bool kHasLeanForward = VEC > 1;

// The forward register kernel for a call: without the mask paths when the
// call has none and the shape has that build.
template <bool kLog, class T, int VEC, int P, int G, int R, bool kAhead = false>
auto forward_registers_kernel(const xvk_softmax_forward_args &a) {
  if constexpr (kHasLeanForward<VEC>)
    if (!has_mask(a)) return softmax_forward_registers<kLog, false, T, VEC, P, G, R, kAhead>;
  return softmax_forward_registers<kLog, true, T, VEC, P, G, R, kAhead>;
}

// Instantiates the kernel that Config c names, for forward (softmax or
// log-softmax, kLog) or backward (which tells them apart at run time).
template <bool kForward, bool kLog, class T, int VEC, class Args>
xvk_status_t launch_config(Context &ctx, const Config &c, const Args &a) {
  xvk_status_t status = XVK_ERROR_INTERNAL;
  switch (c.variant) {
    case Variant::kGroup:
      with_group_shape(c.group, c.packs, c.rows, [&](auto g, auto packs, auto rows) {
        constexpr int G = decltype(g)::value, P = decltype(packs)::value, R = decltype(rows)::value;
        if constexpr (kForward)
          status = launch_rows(ctx, c, forward_registers_kernel<kLog, T, VEC, P, G, R>(a), "softmax_forward_registers",
                               a.rows, int64_t(c.threads / G) * R, a);
        else
          status = launch_rows(ctx, c, softmax_backward_registers<T, VEC, P, G, R>, "softmax_backward_registers", a.rows, int64_t(c.threads / G) * R, a);
      });
      break;
    case Variant::kBlock:
      with_block_packs(c.packs, [&](auto packs) {
        constexpr int P = decltype(packs)::value;
        if constexpr (kForward) {
          constexpr bool kAhead = kHasL2RowAhead<T, VEC, P>;
          status = launch_block_rows<kAhead>(ctx, c, forward_registers_kernel<kLog, T, VEC, P, 0, 1>(a),
                                             forward_registers_kernel<kLog, T, VEC, P, 0, 1, kAhead>(a),
                                             "softmax_forward_registers", a.rows, a.cols * int64_t(sizeof(T)), a);
        } else
          status = launch_rows(ctx, c, softmax_backward_registers<T, VEC, P, 0, 1>, "softmax_backward_registers", a.rows, 1, a);
      });
      break;
    case Variant::kReread:
      if constexpr (kForward)
        status = launch_rows(ctx, c, softmax_forward_reread<kLog, T, VEC>, "softmax_forward_reread", a.rows, 1, a);
      else
        status = launch_rows(ctx, c, softmax_backward_reread<T, VEC>, "softmax_backward_reread", a.rows, 1, a);
      break;
    case Variant::kShared:
      if constexpr (kForward)
        status = launch_rows_smem(ctx, c, softmax_forward_shared<kLog, T, VEC>, "softmax_forward_shared", a.rows, 1,
                                  size_t(config_shared_bytes(OpKind::kSoftmaxForward, c, a.cols, sizeof(T))), a);
      else
        status = launch_rows_smem(ctx, c, softmax_backward_shared<T, VEC, Staged::kBoth>, "softmax_backward_shared",
                                  a.rows, 1, size_t(config_shared_bytes(OpKind::kSoftmaxBackward, c, a.cols, sizeof(T))), a);
      break;
    case Variant::kSharedDy:  // the backward's only (complete_config)
      if constexpr (!kForward)
        status = launch_rows_smem(ctx, c, softmax_backward_shared<T, VEC, Staged::kDy>, "softmax_backward_shared",
                                  a.rows, 1, size_t(config_shared_bytes(OpKind::kSoftmaxBackward, c, a.cols, sizeof(T))), a);
      break;
    case Variant::kRing:  // the forward's, on 16-byte vectors, where copies run in the background (complete_config)
      if constexpr (kForward && kAsyncCopy && VEC * sizeof(T) == 16)
        with_ring_packs(c.packs, [&](auto packs) {
          constexpr int P = decltype(packs)::value;
          status = launch_rows_smem(ctx, c, softmax_forward_ring<kLog, T, VEC, P>, "softmax_forward_ring", a.rows, 1,
                                    size_t(config_shared_bytes(OpKind::kSoftmaxForward, c, a.cols, sizeof(T))), a,
                                    c.group);
        });
      break;
    case Variant::kRereadSums:  // the norm backward's (complete_config)
    case Variant::kCluster:     // the norm backward's (complete_config)
    case Variant::kWarpRing:    // the norm forward's (complete_config)
      break;
  }
  return status;
}

template <bool kForward, class Args>
xvk_status_t run(Context &ctx, const Args &a, int vec, OpKind op, const Config *forced) {
  const Config c = config_for(ctx, forced, op, flavour_of(a.log), a, vec);
  return launch_typed(a.dtype, c.vec, [&](auto tag, auto v) {
    using T = decltype(tag);
    constexpr int VEC = decltype(v)::value;
    if constexpr (kForward)
      return a.log ? launch_config<true, true, T, VEC>(ctx, c, a) : launch_config<true, false, T, VEC>(ctx, c, a);
    else
      return launch_config<false, false, T, VEC>(ctx, c, a);
  });
}


}  // namespace

int softmax_forward_vec(const xvk_softmax_forward_args &a) {
  const int64_t es = element_size(a.dtype), vec = kVectorBytes / es;
  bool ok = a.cols % vec == 0 && rows_aligned(a.x, kVectorBytes, es) && rows_aligned(a.y, kVectorBytes, es);
  if (a.mask) {
    ok = ok && aligned_to(a.mask, kVectorBytes);
    for (int k = 0; k < a.mask_ndim; ++k) ok = ok && (a.mask_stride[k] * es) % kVectorBytes == 0;
  }
  return ok ? int(vec) : 1;
}

xvk_status_t softmax_forward(Context &ctx, const xvk_softmax_forward_args &a, const Config *forced) {
  return run<true>(ctx, a, softmax_forward_vec(a), OpKind::kSoftmaxForward, forced);
}

xvk_status_t softmax_backward(Context &ctx, const xvk_softmax_backward_args &a, const Config *forced) {
  const int64_t es = element_size(a.dtype), vec = kVectorBytes / es;
  const bool ok = a.cols % vec == 0 && rows_aligned(a.y, kVectorBytes, es) && rows_aligned(a.dy, kVectorBytes, es) &&
                  rows_aligned(a.dx, kVectorBytes, es);
  return run<false>(ctx, a, ok ? int(vec) : 1, OpKind::kSoftmaxBackward, forced);
}

}  // namespace xvk::gpu
