// Building blocks shared by the row-wise kernels (softmax, layer_norm,
// rms_norm): vector packs, reductions over a group of lanes or a whole block,
// and the way a row's columns are spread over the threads that own it.
#pragma once

#include <stdint.h>

#include <type_traits>

#include "core/backend_api.h"
#include "cuda/portability.cuh"
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

template <int N>
using IntConst = std::integral_constant<int, N>;

// Bytes per vector access: 16 (LDG.128 / global_load_dwordx4).
inline constexpr int kVectorBytes = 16;
template <class T>
inline constexpr int kMaxVec = kVectorBytes / int(sizeof(T));

// VEC elements of T moved as one aligned access.
template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// Element j of a pack as a float. 16-bit elements are read from their 32-bit
// word (the pair they share), never through a 16-bit register of their own:
// when a pack is split into 16-bit values, nvcc moves each load's halves out
// (PRMT) right after the load, which waits for it, so a batch of loads ran
// one at a time (fp16 BatchNorm statistics, 1.7x the bf16 time). A bfloat16
// is the top half of a float32: one shift or mask. Element 2i is the low half
// of word i on every GPU we build for (little-endian).
template <class T, int VEC>
__device__ __forceinline__ float element(const Pack<T, VEC> &pack, int j) {
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    uint32_t w;
    __builtin_memcpy(&w, &pack.v[j & ~1], sizeof w);
    if constexpr (std::is_same_v<T, bfloat16>)
      return __uint_as_float(j & 1 ? w & 0xffff0000u : w << 16);
    else
      return half_in_word_to_float(w, j & 1);
  } else {
    return to_float(pack.v[j]);
  }
}

template <class T, int VEC>
__device__ __forceinline__ void unpack(const Pack<T, VEC> &pack, float (&out)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = element(pack, j);
}

template <class T, int VEC>
__device__ __forceinline__ void load_pack(const T *p, float (&out)[VEC]) {
  unpack(load_global(reinterpret_cast<const Pack<T, VEC> *>(p)), out);
}

// VEC floats rounded to T; 16-bit values are converted in pairs.
template <class T, int VEC>
__device__ __forceinline__ Pack<T, VEC> to_pack(const float *in) {
  Pack<T, VEC> pack;
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
#pragma unroll
    for (int i = 0; i < VEC; i += 2) {
      const uint32_t word = pack_pair<T>(in[i], in[i + 1]);
      __builtin_memcpy(&pack.v[i], &word, sizeof word);
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) pack.v[i] = from_float<T>(in[i]);
  }
  return pack;
}

template <class T, int VEC>
__device__ __forceinline__ void store_pack(T *p, const float (&in)[VEC]) {
  *reinterpret_cast<Pack<T, VEC> *>(p) = to_pack<T, VEC>(in);
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  static constexpr float kIdentity = 0.0f;
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
  static constexpr float kIdentity = -__builtin_huge_valf();
};

// All-reduce over the G lanes of a group (G a power of two <= kWarpSize):
// every lane gets the result, combined in the same order every time.
template <int G, class Op>
__device__ __forceinline__ float group_all_reduce(float v, Op op) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset, G));
  return v;
}

// Largest number of warps a block of up to 1024 threads can hold.
inline constexpr int kMaxWarpsPerBlock = 1024 / kMinWarpSize;

// All-reduce over the whole block (blockDim.x a multiple of the warp width).
// `scratch` holds M >= N rows of kMaxWarpsPerBlock floats of shared memory
// (checked at compile time); N values are reduced at once to share the
// barriers. Every warp re-reduces the per-warp
// partials itself, so no broadcast barrier is needed, and the trailing
// barrier lets the caller reuse scratch at once.
template <int N, int M, class Op>
__device__ __forceinline__ void block_all_reduce(float (&v)[N], Op op, float (&scratch)[M][kMaxWarpsPerBlock]) {
  static_assert(N <= M, "a row of scratch per value");
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = group_all_reduce<kWarpSize>(v[i], op);
  const int warps = int(blockDim.x) / kWarpSize;
  if (lane_id() == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch[i][warp_id()] = v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float partial = lane_id() < warps ? scratch[i][lane_id()] : Op::kIdentity;
    v[i] = group_all_reduce<kWarpSize>(partial, op);
  }
  __syncthreads();
}

// Reduction over the threads that own a row: a group of G lanes, or the whole
// block when G == 0.
template <int G>
struct RowReducer {
  template <int N, int M, class Op>
  __device__ __forceinline__ static void all_reduce(float (&v)[N], Op op, float (&)[M][kMaxWarpsPerBlock]) {
    static_assert(N <= M, "a row of scratch per value (as the block's reduction needs)");
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = group_all_reduce<G>(v[i], op);
  }
};
template <>
struct RowReducer<0> {
  template <int N, int M, class Op>
  __device__ __forceinline__ static void all_reduce(float (&v)[N], Op op, float (&scratch)[M][kMaxWarpsPerBlock]) {
    block_all_reduce(v, op, scratch);
  }
};

// How the register variants spread rows over threads. A row is owned by a
// group of G lanes (or the whole block when G == 0); each owner holds ROWS
// rows at once; lane `lane` of the owner holds vectors p * width + lane,
// p < PACKS, so that neighbouring lanes touch neighbouring memory.
// Loops run over warp_row, which is the same for all lanes of a warp, and
// each group adds its own offset: a group past the last row keeps taking
// part in the warp's shuffles with masked data instead of leaving the loop.
template <int G, int ROWS>
struct RowMapping {
  int lane, width;
  int64_t first_warp_row, offset, row_step;
  __device__ __forceinline__ RowMapping() {
    if constexpr (G == 0) {
      lane = int(threadIdx.x);
      width = int(blockDim.x);
      first_warp_row = int64_t(blockIdx.x) * ROWS;
      offset = 0;
      row_step = int64_t(gridDim.x) * ROWS;
    } else {
      lane = int(threadIdx.x) % G;
      width = G;
      const int groups_per_block = int(blockDim.x) / G;
      const int group = int(threadIdx.x) / G;
      const int group_in_warp = (int(threadIdx.x) % kWarpSize) / G;
      offset = int64_t(group_in_warp) * ROWS;
      first_warp_row = (int64_t(blockIdx.x) * groups_per_block + group) * ROWS - offset;
      row_step = int64_t(gridDim.x) * groups_per_block * ROWS;
    }
  }
  // First column of vector p of this lane.
  __device__ __forceinline__ int col(int p, int vec) const { return (p * width + lane) * vec; }
};

// The kCluster kernels (thread block clusters, NVIDIA sm_90 and later): a
// cluster of `blocks` blocks owns a row at a time, rows first_row,
// first_row + row_step, ...; block `rank` owns columns [begin, end) of each,
// a slice of slice_cols columns (the last may be shorter), its lane `lane`
// holding vectors p * blockDim.x + lane of the slice as RowMapping's lanes
// do over a whole row.
struct ClusterSlice {
  int rank, blocks, begin, end, lane, width;
  int64_t first_row, row_step;
  __device__ __forceinline__ ClusterSlice(int slice_cols, int64_t cols) {
    rank = int(cluster_block_rank());
    blocks = int(cluster_blocks());
    begin = rank * slice_cols;
    end = int(int64_t(begin) + slice_cols < cols ? begin + slice_cols : cols);
    lane = int(threadIdx.x);
    width = int(blockDim.x);
    first_row = cluster_index();
    row_step = cluster_count();
  }
  __device__ __forceinline__ int col(int p, int vec) const { return begin + (p * width + lane) * vec; }
};

// Where the blocks of a cluster meet a row's sums. Row k of a cluster's
// rows (k = 0, 1, ...) goes to slots k % 2: slot[k % 2][r] holds block r's
// share (two floats), and arrived[k % 2] completes a phase when every
// block's share has landed. A block stores row k's shares only after it has
// had every share of row k - 1, which no block sends before its threads have
// read their slots of row k - 2 (a block barrier lies between): so two sets
// of slots are enough, and a barrier's phase k / 2 cannot complete before
// every thread has waited out phase k / 2 - 1.
struct RowShares {
  float2 slot[2][kMaxClusterBlocks];
  uint64_t arrived[2];
  // Called before a cluster barrier that every block passes before its
  // first share.
  __device__ __forceinline__ void init() {
    if (threadIdx.x == 0) transaction_barrier_init(&arrived[0]), transaction_barrier_init(&arrived[1]);
  }
  // Sends this block's share of row k's sums (after a block-wide reduction:
  // every thread holds `mine`) to every block of the cluster, itself
  // included. Nothing waits here: see store_async_to_cluster_block.
  __device__ __forceinline__ void share(const ClusterSlice &slice, unsigned k, float2 mine) {
    const int set = int(k & 1);
    if (threadIdx.x == 0) transaction_barrier_expect(&arrived[set], unsigned(sizeof(float2)) * slice.blocks);
    if (int(threadIdx.x) < slice.blocks) store_async_to_cluster_block(&slot[set][slice.rank], &arrived[set], threadIdx.x, mine);
  }
  // Row k's sums over the whole row, once every block's share is in: added
  // in rank order, so the same bits in every block, run to run.
  __device__ __forceinline__ float2 total(const ClusterSlice &slice, unsigned k) {
    const int set = int(k & 1);
    transaction_barrier_wait(&arrived[set], (k >> 1) & 1);
    float2 t = make_float2(0.0f, 0.0f);
    for (int r = 0; r < slice.blocks; ++r) t.x += slot[set][r].x, t.y += slot[set][r].y;
    return t;
  }
};

// A lane's share of a row loaded in two steps: first every load is issued
// (issue_row), then the values are unpacked (unpack_row). With a use between
// two loads, each load would wait out the previous one's memory latency;
// issued together, they are in flight at once. The norm register kernels
// load this way, and the softmax forward ones with lanes of up to 16
// elements (with more, holding the raw vectors beside the floats spilled).
// Vectors not loaded (col >= cols, or !valid) read as 0.
template <class T, int VEC, int PACKS, class Map>
__device__ __forceinline__ void issue_row(const Map &map, const T *row, bool valid, int cols, Pack<T, VEC> (&raw)[PACKS]) {
  using Raw = Pack<T, VEC>;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const bool load = valid && map.col(p, VEC) < cols;
    if constexpr (sizeof(Raw) % 4 == 0) {
      // Chosen as 32-bit words: chosen as a pack of 16-bit values, the
      // choice took a byte permute per element (seen in sm_90 SASS).
      using Words = Pack<uint32_t, int(sizeof(Raw)) / 4>;
      Words w{};  // all bits 0: 0.0 in every type
      if (load) w = load_global(reinterpret_cast<const Words *>(row + map.col(p, VEC)));
      __builtin_memcpy(&raw[p], &w, sizeof w);
    } else {
      raw[p] = Raw{};
      if (load) raw[p] = load_global(reinterpret_cast<const Raw *>(row + map.col(p, VEC)));
    }
  }
}

// Variant::kWarpRing's rows in flight (asynchronous copies, kAsyncCopy): a
// ring of row slots in the block's dynamic shared memory, as many as the
// launch gave it room for. Each lane copies its own vectors (RowMapping's
// columns) of its group's next rows and reads back only those, so no
// barrier is needed; vector p of slot s of thread t lies at
// (s * PACKS + p) * blockDim.x + t, neighbouring threads in neighbouring 16
// bytes. fill() starts the first rows; take() waits for the oldest, reads
// it and refills its slot with the row `slots` ahead (the thread's own reads
// of the slot come first in its program order, so the copy cannot overtake
// them). Rows past the last are committed as empty groups, so that every
// wait counts rows.
template <class T, int VEC, int PACKS, class Map>
struct RowRing {
  using Raw = Pack<T, VEC>;
  static_assert(sizeof(Raw) == 16, "the copies move 16-byte vectors");
  const Map &map;
  Raw *mine;  // this thread's vector 0 of slot 0
  int slots, slot = 0;
  int64_t copy_row;
  __device__ __forceinline__ RowRing(void *shared, const Map &m) : map(m) {
    mine = static_cast<Raw *>(shared) + threadIdx.x;
    slots = int(dynamic_shared_bytes() / (sizeof(Raw) * PACKS * blockDim.x));
    copy_row = map.first_warp_row + map.offset;
  }
  __device__ __forceinline__ Raw *at(int s, int p) const { return mine + (s * PACKS + p) * int(blockDim.x); }
  // Copies row copy_row (of x, when it is one) into slot s.
  __device__ __forceinline__ void copy(int s, const T *x, int64_t row_stride, int64_t rows, int cols) {
    if (copy_row < rows) {
      const T *row = x + copy_row * row_stride;
#pragma unroll
      for (int p = 0; p < PACKS; ++p)
        if (map.col(p, VEC) < cols) copy_async_16(at(s, p), row + map.col(p, VEC));
    }
    async_copies_commit();
    copy_row += map.row_step;
  }
  __device__ __forceinline__ void fill(const T *x, int64_t row_stride, int64_t rows, int cols) {
    for (int s = 0; s < slots; ++s) copy(s, x, row_stride, rows, cols);
  }
  // The oldest row into raw (vectors past cols read as 0); its slot refilled.
  __device__ __forceinline__ void take(const T *x, int64_t row_stride, int64_t rows, int cols, Raw (&raw)[PACKS]) {
    async_copies_wait(slots - 1);
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      using Words = Pack<uint32_t, 4>;  // chosen as words, as issue_row does
      Words w{};
      if (map.col(p, VEC) < cols) w = *reinterpret_cast<const Words *>(at(slot, p));
      __builtin_memcpy(&raw[p], &w, sizeof w);
    }
    copy(slot, x, row_stride, rows, cols);
    if (++slot == slots) slot = 0;
  }
};

// Asks L2 for a lane's share of a row (prefetch_l2: no register, no wait),
// one request per 128-byte line: from the lane whose vector starts the line.
// For rows beyond the ones in flight in registers: their later loads then
// find L2 rather than memory.
template <class T, int VEC, int PACKS, class Map>
__device__ __forceinline__ void prefetch_row_l2(const Map &map, const T *row, bool valid, int cols) {
  if (!valid) return;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const T *v = row + map.col(p, VEC);
    if (map.col(p, VEC) < cols && reinterpret_cast<uintptr_t>(v) % 128 < VEC * sizeof(T)) prefetch_l2(v);
  }
}

// Asks L2 for the bytes [p, p + bytes), the block's threads taking every
// blockDim.x-th 128-byte step from p: a pointer and a counter per thread,
// whatever the span, for kernels whose registers are all taken.
__device__ __forceinline__ void prefetch_span_l2(const void *p, int64_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (int64_t off = int64_t(threadIdx.x) * 128; off < bytes; off += int64_t(blockDim.x) * 128) prefetch_l2(c + off);
}

// The block register kernels (a row per block) that are also built asking
// L2 for the block's next row once the current row's loads are done
// (launch_block_rows chooses): those of 16-byte vectors and at least 64
// bytes per thread, whose blocks are few and long-lived enough for memory to
// go idle while they reduce and write a row. Others are built once, so that
// their code (at the register bound) stays as it is.
template <class T, int VEC, int PACKS>
inline constexpr bool kHasL2RowAhead = kL2Prefetch && VEC * int(sizeof(T)) == kVectorBytes && PACKS * VEC * int(sizeof(T)) >= 64;

template <class T, int VEC, int PACKS>
__device__ __forceinline__ void unpack_row(const Pack<T, VEC> (&raw)[PACKS], float (&out)[PACKS][VEC]) {
#pragma unroll
  for (int p = 0; p < PACKS; ++p) unpack(raw[p], out[p]);
}

}  // namespace xvk::gpu

namespace xvk::gpu {

// Loads VEC elements from p as floats in accesses of at most kVectorBytes
// (so p needs alignment of min(16, VEC * sizeof(T)) bytes).
template <class T, int VEC>
__device__ __forceinline__ void load_vec(const T *p, float (&out)[VEC]) {
  constexpr int kChunk = VEC < kMaxVec<T> ? VEC : kMaxVec<T>;
#pragma unroll
  for (int c = 0; c < VEC; c += kChunk) {
    float part[kChunk];
    unpack(load_global(reinterpret_cast<const Pack<T, kChunk> *>(p + c)), part);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) out[c + i] = part[i];
  }
}

template <class T, int VEC>
__device__ __forceinline__ void store_vec(T *p, const float (&in)[VEC]) {
  constexpr int kChunk = VEC < kMaxVec<T> ? VEC : kMaxVec<T>;
#pragma unroll
  for (int c = 0; c < VEC; c += kChunk) *reinterpret_cast<Pack<T, kChunk> *>(p + c) = to_pack<T, kChunk>(in + c);
}

// store_vec through streaming stores (store_global_streaming): whole packs
// of at least 4 bytes.
template <class T, int VEC>
__device__ __forceinline__ void store_vec_streaming(T *p, const float (&in)[VEC]) {
  constexpr int kChunk = VEC < kMaxVec<T> ? VEC : kMaxVec<T>;
#pragma unroll
  for (int c = 0; c < VEC; c += kChunk)
    store_global_streaming(reinterpret_cast<Pack<T, kChunk> *>(p + c), to_pack<T, kChunk>(in + c));
}

// ---------------------------------------------------------------------------
// Compile-time shapes behind the run-time Config (see tuning/tuning.hpp).
// ---------------------------------------------------------------------------

// Calls f(IntConst<P>) for the P of the list that equals packs; returns
// false if none does.
template <class F, int... P>
bool with_packs_of(std::integer_sequence<int, P...>, int packs, F &&f) {
  return ((packs == P ? (f(IntConst<P>{}), true) : false) || ...);
}

// Calls f(IntConst<G>, IntConst<PACKS>, IntConst<ROWS>) for an instantiated
// group shape; returns false if (group, packs, rows) is not one.
template <class F>
bool with_group_shape(int group, int packs, int rows, F &&f) {
  if (packs == 1) {
    switch (group * 4 + rows) {
      case 1 * 4 + 1: f(IntConst<1>{}, IntConst<1>{}, IntConst<1>{}); return true;
      case 1 * 4 + 2: f(IntConst<1>{}, IntConst<1>{}, IntConst<2>{}); return true;
      case 2 * 4 + 1: f(IntConst<2>{}, IntConst<1>{}, IntConst<1>{}); return true;
      case 2 * 4 + 2: f(IntConst<2>{}, IntConst<1>{}, IntConst<2>{}); return true;
      case 4 * 4 + 1: f(IntConst<4>{}, IntConst<1>{}, IntConst<1>{}); return true;
      case 4 * 4 + 2: f(IntConst<4>{}, IntConst<1>{}, IntConst<2>{}); return true;
      case 8 * 4 + 1: f(IntConst<8>{}, IntConst<1>{}, IntConst<1>{}); return true;
      case 8 * 4 + 2: f(IntConst<8>{}, IntConst<1>{}, IntConst<2>{}); return true;
      case 16 * 4 + 1: f(IntConst<16>{}, IntConst<1>{}, IntConst<1>{}); return true;
      case 16 * 4 + 2: f(IntConst<16>{}, IntConst<1>{}, IntConst<2>{}); return true;
      case 32 * 4 + 1: f(IntConst<32>{}, IntConst<1>{}, IntConst<1>{}); return true;
      case 32 * 4 + 2: f(IntConst<32>{}, IntConst<1>{}, IntConst<2>{}); return true;
    }
    return false;
  }
  if (group != 32 || rows != 1) return false;
  return with_packs_of(InstantiatedPacks{}, packs, [&](auto p) { f(IntConst<32>{}, p, IntConst<1>{}); });
}

// Calls f(IntConst<PACKS>) for an instantiated block shape.
template <class F>
bool with_block_packs(int packs, F &&f) {
  return with_packs_of(InstantiatedPacks{}, packs, f);
}

// Calls f(IntConst<PACKS>) for an instantiated kRereadSums shape
// (RereadSumsPacks, tuning.hpp).
template <class F>
bool with_reread_sums_packs(int packs, F &&f) {
  return with_packs_of(RereadSumsPacks{}, packs, f);
}

// Calls f(IntConst<PACKS>) for an instantiated kCluster shape (ClusterPacks,
// tuning.hpp).
template <class F>
bool with_cluster_packs(int packs, F &&f) {
  return with_packs_of(ClusterPacks{}, packs, f);
}

// Calls f(IntConst<PACKS>) for an instantiated kRing shape (RingPacks,
// tuning.hpp).
template <class F>
bool with_ring_packs(int packs, F &&f) {
  return with_packs_of(RingPacks{}, packs, f);
}

// Calls f(T{}) with the storage type of an xvk_dtype_id.
template <class F>
void with_dtype(int dtype, F &&f) {
  switch (dtype) {
    case XVK_DTYPE_F16: f(half{}); break;
    case XVK_DTYPE_BF16: f(bfloat16{}); break;
    default: f(float{}); break;
  }
}

// Calls f(IntConst<VEC>) for the widest vector (vec > 1) or the scalar path.
template <class T, class F>
void with_vec(int vec, F &&f) {
  if (vec > 1)
    f(IntConst<kMaxVec<T>>{});
  else
    f(IntConst<1>{});
}

}  // namespace xvk::gpu
