// BatchNorm on the GPU: training forward (per-channel Welford statistics),
// inference forward, backward, fused (add +) ReLU and the library's ReLU
// bitmask (xvk.h: bit i of the mask is element i in memory order, packed in
// 32-bit words whatever the warp width).
//
// Each call is two kernels over the activation (the minimal algorithm when
// the tensor does not fit on chip):
//   1. a per-channel reduction (Welford of x; or sums of g and g * (x - mean)
//      for the backward) whose blocks write partial results, then a small
//      finalize kernel that merges each channel's partials in a fixed order
//      (deterministic, no float atomics) and writes the per-channel outputs
//      and coefficients;
//   2. an elementwise pass that applies them (y = (x - mean) * scale + beta
//      (+ z), ReLU, mask; or dx, dz). Both memory orders are rows of
//      columns here (channels-last: n * s rows of c; channels-first: n rows
//      of c * s), a thread keeping its column vector's coefficients in
//      registers; a flat kernel that finds each element's channel covers
//      the rest (rows not a whole number of vectors).
// The reduction has three shapes: reduce_channels_first runs a group of
// threads (up to the block) along each channel's (n, c) planes;
// reduce_columns runs lanes across the rows' columns and threads down the
// rows, a state per column (channels-last, where a column is a channel, and
// channels-first planes that are not whole vectors, where finalize merges a
// channel's s columns); reduce_spans reads such channels-first planes, a
// run of channels of one sample at a time, as contiguous whole vectors (the
// backward's gradient sums; make_plan chooses). Inference only runs pass 2. A
// training forward that fits in shared memory may instead run as one
// cooperative kernel (forward_single_pass, forward_single_pass_last for
// channels-last), which reads x once, where the tuning table says it is
// faster (tuning/sm90_batch_norm.cpp has the measurements); channels-last,
// forward_single_pass_held also takes wide rows and tensors larger than the
// tiles, keeping what they hold and reading the rest twice. Channels-first,
// forward_channel_groups runs the training forward as one ordinary kernel
// whose blocks each hold a few whole channels (every sample's planes of
// them), where the table says; for larger tiles (16-bit, no z),
// forward_channel_groups_streamed's persistent blocks walk such groups,
// copying the next while they write the last. Like every
// kernel, finalize and pass 2 start by launch_kernel (programmatic dependent
// launch on sm_90): launched while the kernel before them drains, not after (H200: 256x2048x7x7 NCHW fp16 bn+relu forward 60.7
// -> 57.6 us, (16, 32, 112, 112) fp16 backward 29.2 -> 25.9 us). Letting them
// launch earlier still (griddepcontrol.launch_dependents in the kernel before)
// was slower after pass 1: their resident, waiting blocks took the slots of
// running ones (16 x 32 x 112 x 112 NHWC forward 36.7 -> 44.4 us; H200, the
// small shapes: 0.7% more time in geometric mean). finalize, a few small
// blocks, does let pass 2 launch once it has waited (allow_next_kernel).
// Pass 1 letting finalize launch once each block is past its loads, and
// finalize letting pass 2 launch before it waits (so that pass 2 starts its
// staging while pass 1 drains), was slower too: H200, 1.006x the time over
// the 144 training cases, channels-last 16-bit 1.013x, its (16, 32, 112,
// 112) backwards 1.06-1.07x (bench/results/h200-2026-12-03-session46-trials.txt,
// item 3).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "cuda/launch.cuh"

namespace xvk::gpu {
namespace {

constexpr int kThreads = 256;       // every BatchNorm kernel
constexpr int kWordBits = 32;       // mask word: library format, not the warp width
// Gate bits (one per element, as in a mask word) when there is no ReLU: every
// element's gradient passes.
constexpr uint32_t kGateOpen = uint32_t((uint64_t(1) << kWordBits) - 1);

// ---------------------------------------------------------------------------
// Index arithmetic: the channel of a flat element index.
// ---------------------------------------------------------------------------

// Quotient by a fixed divisor 1 <= d < 2^63 by a multiply instead of a
// division: q = (umulhi(n, magic) + n) >> shift, shift = ceil(log2 d), magic
// = floor(2^W (2^shift - d) / d) + 1 for W-bit words (the round-up method of
// Granlund and Montgomery). div(n, true): the 32-bit form, for n < 2^32 and d
// <= 2^31 (tensors under 2^31 elements; a few instructions); otherwise the
// 64-bit form, for n < 2^63 (so the sum fits). A 64-bit `/` would be a called
// subroutine that costs a kernel registers even on a path never taken.
struct FastDivider {
  uint64_t magic64 = 0;
  uint32_t magic32 = 0, shift = 0;
  FastDivider() = default;
  explicit FastDivider(uint64_t d) {
    while (shift < 63 && (uint64_t(1) << shift) < d) ++shift;
    using u128 = unsigned __int128;
    magic64 = uint64_t((u128(1) << 64) * u128((uint64_t(1) << shift) - d) / d + 1);
    if (shift <= 31) magic32 = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint64_t div(uint64_t n, bool small) const {
    if (small) return uint32_t((uint64_t(__umulhi(uint32_t(n), magic32)) + uint32_t(n)) >> shift);
    return (__umul64hi(n, magic64) + n) >> shift;
  }
};

// The tensor as the kernels see it. Flat element e belongs to channel
// (e / inner) % c, with inner = s for channels-first and 1 for channels-last;
// e % inner is its place in the run of one channel. As a matrix it is `rows`
// rows of row_len = c * inner elements (channels-last: the n * s positions
// by c channels; channels-first: the n samples by c * s), and column k of
// every row belongs to channel k / inner.
struct Shape {
  int64_t n, c, s, numel, inner, rows, row_len;
  bool small;  // numel < 2^31: every index and quotient fits the 32-bit FastDivider
  FastDivider div_inner, div_c;
};

Shape make_shape(int64_t n, int64_t c, int64_t s, bool channels_last) {
  Shape sh;
  sh.n = n;
  sh.c = c;
  sh.s = s;
  sh.numel = n * c * s;
  sh.inner = channels_last ? 1 : s;
  sh.row_len = c * sh.inner;
  sh.rows = channels_last ? n * s : n;
  sh.small = sh.numel < (int64_t(1) << 31);
  sh.div_inner = FastDivider(uint64_t(sh.inner));
  sh.div_c = FastDivider(uint64_t(c));
  return sh;
}

__device__ __forceinline__ void channel_at(const Shape &sh, int64_t e, int &ch, int64_t &r) {
  const uint64_t q = sh.div_inner.div(uint64_t(e), sh.small);
  r = e - int64_t(q) * sh.inner;
  ch = int(q - sh.div_c.div(q, sh.small) * uint64_t(sh.c));
}

// The channel of column k of the tensor's rows (k < row_len).
__device__ __forceinline__ int column_channel(const Shape &sh, int64_t k) {
  return int(sh.div_inner.div(uint64_t(k), sh.small));
}

// Moves (ch, r) to the next flat element.
__device__ __forceinline__ bool step_channel(const Shape &sh, int &ch, int64_t &r) {
  if (++r < sh.inner) return false;
  r = 0;
  if (++ch == sh.c) ch = 0;
  return true;
}

// Loads VEC elements at flat index e, or the valid ones (the rest 0) when the
// vector runs past the end.
template <class T, int VEC>
__device__ __forceinline__ void load_tail(const T *p, int64_t e, int64_t numel, float (&v)[VEC]) {
  if (e + VEC <= numel) {
    load_vec<T, VEC>(p + e, v);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = e + j < numel ? to_float(load_global(p + e + j)) : 0.0f;
  }
}

template <class T, int VEC>
__device__ __forceinline__ void store_tail(T *p, int64_t e, int64_t numel, const float (&v)[VEC]) {
  if (e + VEC <= numel) {
    store_vec<T, VEC>(p + e, v);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      if (e + j < numel) p[e + j] = from_float<T>(v[j]);
  }
}

__device__ __forceinline__ float relu(float v) { return (v > 0.0f || v != v) ? v : 0.0f; }  // NaN stays NaN

// ---------------------------------------------------------------------------
// Pass 2: elementwise.
// ---------------------------------------------------------------------------

// Per-channel coefficients written by pass 1 (or the inference prologue),
// one 16-byte load per channel: forward y = (x - center) * a + b, with center
// the channel's shift (its first element; the running mean in inference),
// a = gamma * rstd, b = beta - (mean - center) * a; backward
// dx = a * g + b * (x - center) + c with center = the saved mean. x - center
// is exact for data near the center (Sterbenz), so data far from 0 (mean
// 1e4, std 1e-2) keeps its precision where x * a + (beta - mean * a) would not.
struct alignas(16) Coef {
  float center, a, b, c;
  __device__ float forward(float x) const { return (x - center) * a + b; }
  __device__ float backward(float g, float x) const { return a * g + b * (x - center) + c; }
};

// Where the forward pass 2 finds a channel's coefficients: in `coef`, written
// by pass 1 (training), or, when that is null (inference), from the running
// statistics, each thread computing its own channels' as it starts: no
// kernel before pass 2, whose launch cost a few us on small tensors.
struct CoefTable {
  const Coef *coef;
  const float *running_mean, *running_var, *gamma, *beta;
  float epsilon;
  __device__ Coef operator[](int64_t ch) const {
    if (coef) return coef[ch];
    const float rstd = 1.0f / sqrtf(running_var[ch] + epsilon);
    return Coef{running_mean[ch], (gamma ? gamma[ch] : 1.0f) * rstd, beta ? beta[ch] : 0.0f, 0.0f};
  }
};

// Resident blocks per SM the pass-2 kernels are compiled for: a cap of 128
// registers (left alone, nvcc took up to 153 for the 16-bit kernels, one
// block per SM; a cap of 80 or 64 spilled 300-900 bytes).
constexpr int kApplyMinBlocks = 2;

template <class T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T *p, int64_t e) {
  return load_global(reinterpret_cast<const Pack<T, VEC> *>(p + e));
}

// load_pack, through a last-use load (load_global_last) when LAST.
template <class T, int VEC, bool LAST>
__device__ __forceinline__ Pack<T, VEC> load_pack_once(const T *p, int64_t e) {
  const auto *q = reinterpret_cast<const Pack<T, VEC> *>(p + e);
  if constexpr (LAST) return load_global_last(q);
  else return load_global(q);
}

// The same, or the elements before numel (the rest 0) for a tail vector.
template <class T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack_tail(const T *p, int64_t e, int64_t numel) {
  if (e + VEC <= numel) return load_pack<T, VEC>(p, e);
  Pack<T, VEC> k;
#pragma unroll
  for (int j = 0; j < VEC; ++j) k.v[j] = e + j < numel ? load_global(p + e + j) : from_float<T>(0.0f);
  return k;
}

// The largest float that rounding to nearest even makes 0 in T: y stored as T
// is > 0 exactly when the float it is rounded from is above this (NaN: not
// above). Saves rounding every element twice (to T and back) for the mask.
template <class T>
__device__ __forceinline__ float largest_rounding_to_zero() {
  if constexpr (sizeof(T) == 4) return 0.0f;
  else if constexpr (std::is_same_v<T, half>) return 0x1p-25f;  // half fp16's least subnormal 2^-24: ties to 0
  else return 0x1p-134f;                                         // half bfloat16's least subnormal 2^-133
}

// The coefficients of a pass-2 rows thread's column vector (the rows
// kernels below): SETS = 1 when the vector lies in one channel, 2 when it may
// straddle two (channels-first with VEC < s), VEC otherwise.
template <int VEC, int SETS>
struct ColumnCoefs {
  Coef k[SETS];
  int split = VEC;  // SETS == 2: elements j < split use k[0], the rest k[1]
  template <class Table>  // a Coef pointer or a CoefTable
  __device__ ColumnCoefs(const Shape &sh, const Table &coef, int64_t col0, bool active) {
    if constexpr (SETS == 2) {
      const int ch = active ? column_channel(sh, col0) : 0;
      const int64_t room = (ch + 1) * sh.inner - col0;  // elements left in channel ch
      split = room < VEC ? int(room) : VEC;
      k[0] = active ? coef[ch] : Coef{};
      if constexpr (std::is_pointer_v<Table>) {
        // From the table in both cases: `c ? coef[ch + 1] : k[0]` picks
        // between two lvalues here, and hipcc loaded through a pointer to
        // either, k[0] in scratch (flat_load_dwordx4).
        k[1] = active ? coef[split < VEC ? ch + 1 : ch] : Coef{};
      } else {
        k[1] = active && split < VEC ? coef[ch + 1] : k[0];
      }
    } else {
#pragma unroll
      for (int j = 0; j < SETS; ++j) k[j] = active ? coef[column_channel(sh, col0 + j)] : Coef{};
    }
  }
  __device__ __forceinline__ Coef operator()(int j) const { return k[SETS == 1 ? 0 : j]; }  // SETS != 2
};

// Element j's affine part, forward (x - center) * a + b and backward
// a * g + b * (x - center) + c, with the coefficients coef_of(j). With two
// sets, both results and a select: a select of the coefficients would be
// loop-invariant, and nvcc hoists it into VEC sets of registers (16-bit
// forward: 62 registers that way, 48 this way, 64 with VEC sets).
template <class CoefOf>
__device__ __forceinline__ float forward_affine(const CoefOf &coef_of, int j, float x) {
  return coef_of(j).forward(x);
}
template <int VEC>
__device__ __forceinline__ float forward_affine(const ColumnCoefs<VEC, 2> &c, int j, float x) {
  const float v0 = c.k[0].forward(x), v1 = c.k[1].forward(x);
  return j < c.split ? v0 : v1;
}
template <class CoefOf>
__device__ __forceinline__ float backward_affine(const CoefOf &coef_of, int j, float g, float x) {
  return coef_of(j).backward(g, x);
}
template <int VEC>
__device__ __forceinline__ float backward_affine(const ColumnCoefs<VEC, 2> &c, int j, float g, float x) {
  const float v0 = c.k[0].backward(g, x), v1 = c.k[1].backward(g, x);
  return j < c.split ? v0 : v1;
}

// One vector of the forward: y = relu?((x - center) * a + b (+ z)) in float
// (the store rounds it to T), and its mask bits (bit j: stored y[j] > 0, for
// j < valid). coef_of(j) gives element j's coefficients and is called for
// j = 0, 1, ... in order.
template <class T, int VEC, class CoefOf>
__device__ __forceinline__ uint32_t forward_vector(const float (&xf)[VEC], const float (&zf)[VEC], bool has_z,
                                                   int do_relu, int valid, CoefOf coef_of, float (&out)[VEC]) {
  uint32_t bits = 0;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float val = forward_affine(coef_of, j, xf[j]);
    if (has_z) val += zf[j];
    if (do_relu) val = relu(val);
    out[j] = val;
    if (val > largest_rounding_to_zero<T>() && j < valid) bits |= 1u << j;
  }
  return bits;
}

// A mask word covers kWordBits consecutive elements, held VEC at a time by
// kWordBits / VEC consecutive lanes; `slot` is this lane's place among them.
// They OR their bits and the first writes the word at element e (if
// `write`). Every lane of the word must call this, with or without data.
template <int VEC>
__device__ __forceinline__ void store_mask_word(uint32_t *mask, int64_t e, uint32_t bits, int slot, bool write) {
  constexpr int kLanesPerWord = kWordBits / VEC;
  static_assert(kLanesPerWord <= kMinWarpSize, "a mask word's lanes are in one warp");
  bits <<= slot * VEC;
#pragma unroll
  for (int o = kLanesPerWord / 2; o > 0; o /= 2) bits |= shfl_xor_u32(bits, o, kLanesPerWord);
  if (slot == 0 && write) mask[e / kWordBits] = bits;
}

// The flat kernels walk the tensor a warp-width of vectors at a time, one per
// lane (vector c0 + lane: coalesced, and a mask word's lanes together). The
// loop runs per warp, so all of a word's lanes reach store_mask_word.
// (Several vectors per lane loaded ahead were no faster on the H100:
// channels-last fp16 forward of 256x256x56x56, 332 us with 4 against 309.)
// UNIFORM: every vector lies in one channel (channels-first with s % VEC ==
// 0, or VEC == 1), so no per-element channel stepping.

// y = relu?((x - mean) * scale + beta (+ z)), and the mask bits of y > 0.
template <class T, int VEC, bool UNIFORM>
__global__ void __launch_bounds__(kThreads, kApplyMinBlocks) forward_apply(Shape sh, const T *x, const T *z, T *y, uint32_t *mask,
                                                          const CoefTable coef, int do_relu) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  const int lane = lane_id();
  const int64_t vectors = (sh.numel + VEC - 1) / VEC;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x - lane; c0 < vectors; c0 += stride) {
    const int64_t v = c0 + lane, e = v * VEC;
    uint32_t bits = 0;
    if (v < vectors) {
      const Pack<T, VEC> xs = load_pack_tail<T, VEC>(x, e, sh.numel);
      Pack<T, VEC> zs;
      if (z) zs = load_pack_tail<T, VEC>(z, e, sh.numel);
      int ch;
      int64_t r;
      channel_at(sh, e, ch, r);
      Coef k = coef[ch];
      float xf[VEC], zf[VEC], out[VEC];
      unpack(xs, xf);
      if (z) unpack(zs, zf);
      const int valid = sh.numel - e < VEC ? int(sh.numel - e) : VEC;  // a tail vector's padding: no mask bits
      bits = forward_vector<T>(xf, zf, z != nullptr, do_relu, valid, [&](int j) {
        if (!UNIFORM && j > 0 && step_channel(sh, ch, r)) k = coef[ch];
        return k;
      }, out);
      store_tail<T, VEC>(y, e, sh.numel, out);
    }
    if (mask) store_mask_word<VEC>(mask, e, bits, lane % (kWordBits / VEC), v < vectors);
  }
}

// The ReLU gradient's gate for VEC elements at e: mask bits, or y > 0.
template <class T, int VEC, bool LAST = false>
__device__ __forceinline__ uint32_t gate_bits(const T *y, const uint32_t *mask, int64_t e, int64_t numel) {
  if (mask) {
    const uint32_t *word = mask + e / kWordBits;
    if constexpr (LAST) return load_global_last(word) >> (e % kWordBits);
    else return load_global(word) >> (e % kWordBits);  // VEC divides 32 and e
  }
  float ys[VEC];
  load_tail<T, VEC>(y, e, numel, ys);
  uint32_t bits = 0;
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (ys[j] > 0.0f) bits |= 1u << j;
  return bits;
}

// One vector of the backward: g = dy where its gate bit is set (else 0), and
// dx = a * g + b * (x - center) + c. coef_of(j) gives element j's
// coefficients and is called for j = 0, 1, ... in order.
template <int VEC, class CoefOf>
__device__ __forceinline__ void backward_vector(float (&g)[VEC], const float (&xf)[VEC], uint32_t gate, CoefOf coef_of,
                                                float (&out)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    g[j] = (gate >> j) & 1u ? g[j] : 0.0f;
    out[j] = backward_affine(coef_of, j, g[j], xf[j]);
  }
}

// dx = a * g + b * (x - mean) + c, dz = g, with g = dy gated by ReLU. One
// vector per thread, grid-stride (no mask word to assemble, so no warp walk).
template <class T, int VEC, bool UNIFORM>
__global__ void __launch_bounds__(kThreads, kApplyMinBlocks) backward_apply(Shape sh, const T *dy, const T *x, const T *y,
                                                           const uint32_t *mask, T *dx, T *dz, const Coef *coef,
                                                           int do_relu) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  const int64_t vectors = (sh.numel + VEC - 1) / VEC;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
    const int64_t e = v * VEC;
    const Pack<T, VEC> dys = load_pack_tail<T, VEC>(dy, e, sh.numel), xs = load_pack_tail<T, VEC>(x, e, sh.numel);
    const uint32_t bits = do_relu ? gate_bits<T, VEC>(y, mask, e, sh.numel) : kGateOpen;
    int ch;
    int64_t r;
    channel_at(sh, e, ch, r);
    Coef k = coef[ch];
    float g[VEC], xf[VEC], out[VEC];
    unpack(dys, g);
    unpack(xs, xf);
    backward_vector(g, xf, bits, [&](int j) {
      if (!UNIFORM && j > 0 && step_channel(sh, ch, r)) k = coef[ch];
      return k;
    }, out);
    if (dz) store_tail<T, VEC>(dz, e, sh.numel, g);
    store_tail<T, VEC>(dx, e, sh.numel, out);
  }
}

// forward_apply_rows (below): in fp32 a thread loads its first row before
// its coefficients, so a block's first DRAM loads do not wait for them
// (inference: four loads and a square root per channel). Same-run A/B against main before it (sources
// f1684fd), H100, 2026-11-26: NHWC fp32 forwards 0.965-1.001x the time
// (bn+relu 0.987-1.000, inference 0.965-0.999), NCHW fp32 0.978-1.001x but
// 7 x 7 (two coefficient sets: 40 -> 48 registers, a resident block less)
// 1.006-1.016x. On the H200, against the same kernels without it (branch
// exp/s17-combined): NHWC fp32 bn+relu 0.986-0.992x, Add+ReLU 0.979-0.986x
// (the training forwards of (16, 32, 112, 112) take the single pass),
// inference 0.968-0.991x. Not in 16-bit: the held row cost registers (64 ->
// 72 channels-last, a resident block less), 0.98-1.08x the time. The loop's
// `first` flag lets nvcc peel the first trip (testing i against its start
// held the row in registers throughout: 63 registers channels-last).
// Nor with two coefficient sets (SETS == 2: 7 x 7 channels-first), whose
// first row goes to L2 by request instead: H200, same run against main
// (session 44's trials), fp32 256x2048x7x7 inference 0.958x the time, bn+relu
// forward 0.989x, Add+ReLU forward 0.997x.
template <class T, int SETS>
inline constexpr bool kFirstRowEarly = sizeof(T) == 4 && SETS != 2;
// Where the first row is not loaded early (16-bit; SETS == 2), forward_apply_rows asks
// for its x in L2 before the coefficients (no register), so its DRAM latency
// overlaps theirs. H100, same-run A/B against main (6db436a), best of two:
// 16-bit inference 0.2-1.3 us less in all 20 cases (NCHW (16, 32, 112,
// 112) 0.944x the time, 7 x 7 0.974-0.990x, 56 x 56 0.996-0.999x), where
// each thread first computes its coefficients from four running-statistics
// loads and a square root; training forwards within +-0.8 us (noise). The
// same request of dy and x in backward_apply_rows: NCHW 14 x 14 16-bit
// 0.9-1.3 us less, NHWC 0.3-0.5 us more; not taken (bench/results/h100-
// 2026-11-27-batch-norm-finish.txt).

// Pass 2 over the tensor as rows (Shape), when row_len is a multiple of the
// vector (and of 32 when a mask is written): a thread owns one column vector,
// keeps its VEC elements' coefficients in registers and walks down the rows,
// instead of finding and loading a coefficient per element. SETS: how many
// coefficient sets that takes (ColumnCoefs): 1 when the vector lies in one
// channel (channels-first, s % VEC == 0; 16-bit forward: 40 registers
// against 56 with VEC sets, more resident warps, more loads in flight), 2
// when it may straddle two (channels-first, VEC < s: 7 x 7, 14 x 14 planes),
// VEC for channels-last. (Loading 2 or 4 rows ahead per thread was slower on
// the H200: the registers cost more warps than the loads gained; 16-bit
// inference, with no z or mask to hold, gains from two: PAIRS.) tx lanes
// across column vectors, ty down rows; grid (column tiles, row blocks). The
// lanes of one mask word (32 columns of a row) are consecutive tx of one ty,
// and every lane runs the same row loop, so all reach store_mask_word.
// LAST: x and z (backward_apply_rows: dy, x and the mask) through last-use
// loads, where the tuning table's last_use_max_bytes says. H100, loads and
// stores evict-first against main, every size: (16, 32, 112, 112) 0.971x the
// time in geometric mean over the five training and inference ops, 7 x 7
// and 14 x 14 (49 MiB in 16-bit) 1.000x and 1.006x, 28 x 28 and 56 x 56
// 1.010x and 1.014x; stores alone 0.994x on (16, 32, 112, 112). The loads
// alone at (16, 32, 112, 112): 0.970x (channels-first bn+relu backward fp32
// 0.900x, Add+ReLU forward 0.93x; bench/results/h100-2026-11-26-batch-norm-
// last-use.txt). A tensor that L2 can hold keeps more of what pass 2 has yet
// to read; larger ones lose that way. Pass 1 asking L2 to keep the rows it
// reads last for pass 2 (loads with an evict_last policy, 16-40 MiB of
// them) gained nothing at 7 x 7 and 14 x 14 on the H200, and the kept lines
// outlived the call, crowding later kernels out of L2 (session 45's trials).
// PAIRS (kInferencePairs: 16-bit inference without z or a mask): two rows a
// trip, both rows' loads issued before either is used, so each thread keeps
// two in flight. ncu, H200, 256x2048x7x7 inference: these kernels waited on
// their one load most of the time (72% of the cycles between issues, fp32
// NHWC), with 4 (16-bit NHWC) or 5 (fp32) blocks resident by registers.
// H200, same run, against main: 16-bit inference 0.986x the time in
// geometric mean over the benchmark's 24 cases (0.961-0.999; (16, 32, 112,
// 112) 0.96-0.97x, NCHW 14 x 14 0.97x). Float32 gained nothing (0.942-1.019x
// with pairs, NHWC 1.000-1.019x), so it keeps one row a trip
// (bench/results/h200-2026-12-03-session43-trials.txt, items 6 and 7).
// The pairs walk the rows from the first: in inference no pass 1 has left
// the last rows in L2. H200, same run against main (4 rounds alternated):
// 16-bit inference 0.993x the time in geometric mean over 24 cases
// (NHWC 0.970-1.000, NCHW 0.982-1.000 but for one noisy case; session 44's
// trials). Training forwards keep the order: walking them from the first
// too ran 0.995-1.027x.
// Channels-last, the pairs take 8-byte vectors (forward_typed): 4
// coefficient sets a thread instead of 8, 40 registers against 63, so 6
// blocks per SM instead of 4. H200, same run against main (2 rounds):
// NHWC 16-bit inference 0.926-0.998x the time (7 x 7 0.93x, 14 x 14 and
// (16, 32, 112, 112) 0.95-0.97x, 56 x 56 and 112 x 112 0.99-1.00x); the
// training forwards (mask, z: no pairs) ran 1.06-1.14x on 8-byte vectors
// from 7 x 7 up, so they keep 16-byte ones
// (bench/results/h200-2026-12-03-session45-trials.txt, item 4).
template <class T>
inline constexpr bool kInferencePairs = sizeof(T) == 2;

// Staging (training only, `stage` > 0): pass 2 launches while finalize still
// runs (finalize lets it), and its blocks then wait for the coefficients.
// Meanwhile they copy the rows each thread reaches last (those pass 1 read
// first, which L2 no longer holds) into shared memory, so DRAM works through
// the wait. The inputs staged (x and z; dy and x) are written by no kernel
// of the call, and every kernel before the call is complete once pass 1 is,
// so reading them before wait_for_prior_kernel is safe; in inference pass 2
// is the call's first kernel and never stages. Row indices i >= from (the
// last `stage` of every thread's, as the host computes `from`; rows when
// none) are staged: a kernel parameter, so no register holds it, and the
// lanes of a mask word walk the same loops. Slots: [tensor][row][thread] of
// 16-byte packs in dynamic shared memory.
struct Staging {
  int64_t from;  // the first staged row index i
  int stage;     // rows per tensor
};
template <class T, int VEC>
__device__ __forceinline__ Pack<T, VEC> *staged_slot(const Staging &st, int tensor, int q) {
  extern __shared__ uint4 staged_slots[];  // one name and type for every instantiation; 16-byte aligned
  return reinterpret_cast<Pack<T, VEC> *>(staged_slots) + (tensor * st.stage + q) * int(blockDim.x) + int(threadIdx.x);
}
// Starts the copies of a thread's staged rows (i = from + (i0 - from) mod
// step, ...; row rows - 1 - i) of a and, if not null, b.
template <class T, int VEC>
__device__ __forceinline__ void stage_rows(const Staging &st, const Shape &sh, int64_t col0, int64_t i, int64_t step,
                                           const T *a, const T *b) {
  if constexpr (kAsyncCopy && VEC * sizeof(T) == 16) {
    if (st.from >= sh.rows || col0 >= sh.row_len) return;
    if (i < st.from) i += (st.from - i + step - 1) / step * step;
    for (int q = 0; i < sh.rows; i += step, ++q) {
      const int64_t e = (sh.rows - 1 - i) * sh.row_len + col0;
      copy_async_16(staged_slot<T, VEC>(st, 0, q), a + e);
      if (b) copy_async_16(staged_slot<T, VEC>(st, 1, q), b + e);
    }
    async_copies_commit();
  }
}

template <class T, int VEC, int SETS, bool LAST, bool PAIRS = false, bool STAGED = false>
__global__ void __launch_bounds__(kThreads, kApplyMinBlocks) forward_apply_rows(Shape sh, const T *x, const T *z, T *y,
                                                               uint32_t *mask, const CoefTable coef, int do_relu,
                                                               int tile, Staging st) {
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col0 = (int64_t(blockIdx.x) * tile + tx) * VEC;
  const bool active = col0 < sh.row_len;
  const int64_t rows = sh.rows, step = int64_t(gridDim.y) * rows_step;
  int64_t i = int64_t(blockIdx.y) * rows_step + ty;
  if constexpr (STAGED) stage_rows<T, VEC>(st, sh, col0, i, step, x, z);
  const int64_t unstaged_end = STAGED ? st.from : rows;
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  Pack<T, VEC> x_first, z_first;
  if (kFirstRowEarly<T, SETS> && !PAIRS && active && i < unstaged_end) {
    const int64_t e = (rows - 1 - i) * sh.row_len + col0;
    x_first = load_pack_once<T, VEC, LAST>(x, e);
    if (z) z_first = load_pack_once<T, VEC, LAST>(z, e);
  } else if (kL2Prefetch && active && i < rows) {
    const int64_t r = PAIRS ? i : rows - 1 - i;  // the first row into L2 (see kFirstRowEarly)
    prefetch_l2(x + r * sh.row_len + col0);
  }
  const ColumnCoefs<VEC, SETS> k(sh, coef, col0, active);
  if constexpr (PAIRS) {
    if (!active) return;  // no mask words to take part in
    for (; i < rows; i += 2 * step) {  // from the first row (no pass 1 read the last ones), two a trip
      const int64_t r0 = i, r1 = i + step;
      const bool second = r1 < rows;
      const int64_t e0 = r0 * sh.row_len + col0, e1 = r1 * sh.row_len + col0;
      const Pack<T, VEC> x0 = load_pack_once<T, VEC, LAST>(x, e0);
      Pack<T, VEC> x1;
      if (second) x1 = load_pack_once<T, VEC, LAST>(x, e1);
      // The next trip's rows into L2: its second row, and with VEC sets
      // (channels-last) its first row too. H200, same run against main:
      // NHWC 16-bit inference 0.988x the time in geometric mean (0.985-0.993;
      // session 44's trials). Channels-first it did not pay (0.992-1.018x;
      // session 43's trials, item 8), and a runtime test of the layout cost
      // those kernels 2-4% at 7 x 7 and 14 x 14.
      if (kL2Prefetch && SETS == VEC && r1 + step < rows) prefetch_l2(x + e1 + step * sh.row_len);
      if (kL2Prefetch && r1 + 2 * step < rows) prefetch_l2(x + e1 + 2 * step * sh.row_len);
      const auto row = [&](const Pack<T, VEC> &xs, int64_t e) {
        float xf[VEC], zf[VEC] = {}, out[VEC];  // (no z)
        unpack(xs, xf);
        forward_vector<T>(xf, zf, false, do_relu, VEC, k, out);
        store_vec<T, VEC>(y + e, out);
      };
      row(x0, e0);
      if (second) row(x1, e1);
    }
  } else {
    const auto apply_row = [&](const Pack<T, VEC> &xs, const Pack<T, VEC> &zs, int64_t e) {
      float xf[VEC], zf[VEC], out[VEC];
      unpack(xs, xf);
      if (z) unpack(zs, zf);
      const uint32_t bits = forward_vector<T>(xf, zf, z != nullptr, do_relu, VEC, k, out);
      store_vec<T, VEC>(y + e, out);
      return bits;
    };
    // Rows from the last (reduce_columns read those last: L2 may still hold them).
    for (bool first = true; i < unstaged_end; i += step, first = false) {
      const int64_t r = rows - 1 - i;
      const int64_t e = r * sh.row_len + col0;
      uint32_t bits = 0;
      // The next row's x into L2 (no register): the loads in flight that
      // registers could not buy. H200: NHWC 16-bit inference 1.32 -> 1.21x the
      // copy time, bn+relu forward 1.49 -> 1.42x; prefetching z as well made
      // Add+ReLU 1% slower, and the backward (more registers) lost.
      if (kL2Prefetch && active && r >= step) prefetch_l2(x + e - step * sh.row_len);
      if (active) {
        Pack<T, VEC> xs, zs;
        if (kFirstRowEarly<T, SETS> && first) {
          xs = x_first;
          zs = z_first;
        } else {
          xs = load_pack_once<T, VEC, LAST>(x, e);
          if (z) zs = load_pack_once<T, VEC, LAST>(z, e);
        }
        bits = apply_row(xs, zs, e);
      }
      if (mask) store_mask_word<VEC>(mask, e, bits, tx % (kWordBits / VEC), active);
    }
    if (STAGED && i < rows) {  // the staged rows
      if (active) async_copies_wait<0>();
#pragma unroll 1
      for (int q = 0; i < rows; i += step, ++q) {
        const int64_t e = (rows - 1 - i) * sh.row_len + col0;
        uint32_t bits = 0;
        if (active) bits = apply_row(*staged_slot<T, VEC>(st, 0, q), *staged_slot<T, VEC>(st, z ? 1 : 0, q), e);
        if (mask) store_mask_word<VEC>(mask, e, bits, tx % (kWordBits / VEC), active);
      }
    }
  }
}

// The backward with VEC sets of coefficients (channels-last) is compiled for
// 4 resident blocks: 64 registers and a 4-byte spill in 16-bit, against 71
// registers and 3 blocks with kApplyMinBlocks; the NHWC 16-bit bn+relu
// backward ran 2.4% faster on the H200. (The forward at 5 blocks: Add+ReLU
// 3-6% slower.)
template <int VEC, int SETS>
inline constexpr int kBackwardRowsMinBlocks = SETS == VEC ? 4 : kApplyMinBlocks;

template <class T, int VEC, int SETS, bool LAST, bool STAGED = false>
__global__ void __launch_bounds__(kThreads, (kBackwardRowsMinBlocks<VEC, SETS>))
    backward_apply_rows(Shape sh, const T *dy, const T *x, const T *y, const uint32_t *mask, T *dx, T *dz,
                        const Coef *coef, int do_relu, int tile, Staging st) {
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col0 = (int64_t(blockIdx.x) * tile + tx) * VEC;
  const int64_t rows = sh.rows, step = int64_t(gridDim.y) * rows_step;
  int64_t i = int64_t(blockIdx.y) * rows_step + ty;
  if constexpr (STAGED) stage_rows<T, VEC>(st, sh, col0, i, step, dy, x);
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  if (col0 >= sh.row_len) return;
  const ColumnCoefs<VEC, SETS> k(sh, coef, col0, true);
  const auto apply_row = [&](const Pack<T, VEC> &dys, const Pack<T, VEC> &xs, int64_t e) {
    const uint32_t bits = do_relu ? gate_bits<T, VEC, LAST>(y, mask, e, sh.numel) : kGateOpen;
    float g[VEC], xf[VEC], out[VEC];
    unpack(dys, g);
    unpack(xs, xf);
    backward_vector(g, xf, bits, k, out);
    if (dz) store_vec<T, VEC>(dz + e, g);
    store_vec<T, VEC>(dx + e, out);
  };
  // Rows from the last, as forward_apply_rows.
  for (; i < (STAGED ? st.from : rows); i += step) {
    const int64_t e = (rows - 1 - i) * sh.row_len + col0;
    apply_row(load_pack_once<T, VEC, LAST>(dy, e), load_pack_once<T, VEC, LAST>(x, e), e);
  }
  if (!STAGED) return;
  if (i < rows) async_copies_wait<0>();
#pragma unroll 1
  for (int q = 0; i < rows; i += step, ++q)
    apply_row(*staged_slot<T, VEC>(st, 0, q), *staged_slot<T, VEC>(st, 1, q), (rows - 1 - i) * sh.row_len + col0);
}

// ---------------------------------------------------------------------------
// Pass 1: per-channel reductions.
// ---------------------------------------------------------------------------

// Training statistics: Welford state {count, mean, m2}, merged by Chan's rule.
struct Welford {
  static constexpr int K = 3;
  __device__ static void identity(float (&a)[K]) { a[0] = a[1] = a[2] = 0.0f; }
  __device__ static void merge(float (&a)[K], const float (&b)[K]) {
    const float n = a[0] + b[0];
    if (b[0] == 0.0f) return;
    const float d = b[1] - a[1], w = b[0] / n;
    a[1] += d * w;
    a[2] += b[2] + d * d * a[0] * w;
    a[0] = n;
  }
  __device__ static void settle(float (&)[K]) {}
};

// Pairwise sum of a batch's partial sums.
template <int U>
__device__ __forceinline__ float sum_of(const float (&p)[U]) {
  if constexpr (U == 1) {
    return p[0];
  } else {
    float half[(U + 1) / 2];
#pragma unroll
    for (int i = 0; i < U / 2; ++i) half[i] = p[2 * i] + p[2 * i + 1];
    if constexpr (U % 2 == 1) half[U / 2] = p[U - 1];
    return sum_of(half);
  }
}

// Statistics of x - shift, shift = the channel's first element: with data
// far from 0 a float32 Welford mean would carry errors of the data's own
// magnitude (1e4 * 2^-24 per step) into a variance of 1e-4.
template <class T>
__device__ __forceinline__ float channel_shift(const T *x, int64_t ch, int64_t shift_stride) {
  return to_float(load_global(x + ch * shift_stride));
}

// Sources of pass 1: what one access loads (an Item: VEC elements), and how
// a batch of U items, loaded before any is used so that U loads are in
// flight, joins a thread's state. Channels-first batches hold one channel
// (add_items); channels-last items are rows of VEC channels (add_rows).
// add_items: element j of item u is in use when bit j of use[u] is set.
// kPartialItems (ragged planes): any bits; otherwise each use[u] is all or
// nothing (only a part's last batch has unused items), so the sums drop
// unused items whole and need no per-element test.
// A source's kLastMaxVec and kLongRowMaxVec bound the vectors of its column
// reduction for channels-last and channels-first rows: kMaxVec, or
// kNarrowVec where 8-byte vectors of 16-bit data measured faster.
template <class T>
inline constexpr int kNarrowVec = sizeof(T) == 2 ? kMaxVec<T> / 2 : kMaxVec<T>;

template <class T, int VEC>
struct StatsSource : Welford {
  const T *x;
  int64_t shift_stride;  // the channel's first element is x[ch * shift_stride]
  static constexpr int kBatch = VEC == 1 ? 8 : 4;  // items per batch: 4 x 16 bytes in flight per thread
  // Rows by columns (reduce_columns): 16-bit channels-last rows in vectors
  // of half the width (kLastMaxVec), eight at a time (80 registers, 3 blocks
  // per SM). H200, same-run A/B against 16-byte vectors four at a time: NHWC
  // 16-bit training forward 3-4% faster at 7 x 7 and 14 x 14, 8% at (16, 32,
  // 112, 112); channels-first rows (NCHW 7 x 7) 3% slower that way, 9% with
  // four 8-byte rows at a time, so they keep 16-byte vectors.
  static constexpr int kRowBatch = VEC == kMaxVec<T> / 2 && sizeof(T) == 2 ? 8 : kBatch;
  // Blocks per SM of the reductions. Channels-first 16-bit batches reread
  // x - shift from the packed items in the second pass instead of keeping
  // it (VEC more registers per item): 64 registers and 4 blocks, not 72 and
  // 3, so c = 512 blocks run in one wave of 528 slots on an H200, not 1.3
  // (256x512x28x28 fp16 statistics 72 -> 55 us).
  static constexpr int kFirstMinBlocks = 4, kLastMinBlocks = 3;
  static constexpr int kLastMaxVec = kNarrowVec<T>;
  // Channels-first rows by columns: 16-byte vectors, bounded as channels-last.
  static constexpr int kLongRowMaxVec = kMaxVec<T>, kLongRowMinBlocks = kLastMinBlocks;
  // Lanes of a block across a channels-first row (see GradSource): 64 in
  // fp32 (NCHW 7 x 7 training forwards 0.966-0.975x the time against 32);
  // 16-bit keeps 32, the best of 8 to 256 there (64: 7 x 7 forwards
  // 1.08-1.10x, 14 x 14 1.00x).
  static constexpr int kLongRowTile = sizeof(T) == 2 ? 32 : 64;
  // By columns, not spans (reduce_spans): the two channels' count, mean
  // and m2 per batch made NCHW 7 x 7 and 14 x 14 16-bit training forwards
  // 1.08-1.14x slower (H200, bench/results/h200-2026-12-03-session47-spans.txt).
  static constexpr bool kSpans = false;
  struct Item {
    Pack<T, VEC> v;
  };
  __device__ float context(int64_t ch) const { return channel_shift(x, ch, shift_stride); }
  __device__ Item load(int64_t e) const { return {load_pack<T, VEC>(x, e)}; }
  __device__ Item load_tail(int64_t e, int64_t numel) const { return {load_pack_tail<T, VEC>(x, e, numel)}; }
  // The batch's own count, mean and m2 in two passes over registers (the
  // mean, then the squares of the deviations from it; DESIGN.md rules out
  // sum of squares minus square of sum, which a channel whose first element
  // is an outlier turns into noise), then one merge: one division per batch.
  // d = x - shift is exact for data near the shift; fp32 keeps it from the
  // first pass for the second, 16-bit and ragged batches recompute it (see
  // kFirstMinBlocks). Which elements count: see kPartialItems.
  // Unused ones may never have been loaded and are selected away (garbage *
  // 0 may be NaN). One partial sum per item, added pairwise: short chains.
  template <bool kPartialItems, int U>
  __device__ void add_items(float (&a)[K], const Item (&it)[U], const uint32_t (&use)[U], float shift) const {
    float d[U][VEC], part[U];
    int count = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      count += __popc(use[u]);
      unpack(it[u].v, d[u]);
      part[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        d[u][j] -= shift;
        part[u] += !kPartialItems || ((use[u] >> j) & 1u) ? d[u][j] : 0.0f;
      }
      if (!kPartialItems) part[u] = use[u] ? part[u] : 0.0f;
    }
    if (count == 0) return;
    const float mean = sum_of(part) / float(count);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      part[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        // Kept, ragged fp16 batches spilled (80 registers).
        const float e = (kPartialItems || sizeof(T) == 2 ? element(it[u].v, j) - shift : d[u][j]) - mean;
        if (kPartialItems)
          part[u] += (use[u] >> j) & 1u ? e * e : 0.0f;
        else
          part[u] = fmaf(e, e, part[u]);
      }
      if (!kPartialItems) part[u] = use[u] ? part[u] : 0.0f;
    }
    const float b[K] = {float(count), mean, sum_of(part)};
    merge(a, b);
  }
  // Channels-last: item u is row u's VEC channels, rows u < valid in use
  // (kFull: all U, so no per-element test). Every channel of a thread has
  // seen the same rows, so all share one count and one merge weight: one
  // division per batch, not one per channel (channels-last 16-bit ran at
  // ~9 instructions per byte loaded with a division per channel per batch,
  // over twice what the issue rate allows at full bandwidth). d = x - shift
  // is kept from the first pass for the second.
  template <bool kFull, int U>
  __device__ void add_rows(float (&a)[VEC][K], const Item (&it)[U], int valid, const float (&shift)[VEC]) const {
    if (kFull) valid = U;
    const float count = float(valid), inv = 1.0f / count;
    const float n = a[0][0] + count, w = count / n, aw = a[0][0] * w;  // Chan's merge, as Welford::merge
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float d[U], sum = 0.0f, m2 = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        d[u] = element(it[u].v, j) - shift[j];
        sum += kFull || u < valid ? d[u] : 0.0f;
      }
      const float mean = sum * inv;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float e = d[u] - mean;
        m2 += kFull || u < valid ? e * e : 0.0f;
      }
      const float dm = mean - a[j][1];
      a[j][1] += dm * w;
      a[j][2] += m2 + dm * dm * aw;
      a[j][0] = n;
    }
  }
};

// The backward's two sums (of g, and of g * (x - mean)). A thread adds about
// a thousand batch sums, and plain float running sums drifted 1.4e-4
// relative on 2^27 values per channel (the test beyond 2^31 elements): their
// rounding grows with the count. So each sum is two floats: a[k], settled,
// and a[k + 2], the batches added since plus a[k]'s rounding error. A batch
// costs one add; every kSettleBatches the kernels call settle(), which moves
// the recent part into a[k] and keeps the exact error of that addition
// (two_sum: six adds, no branch). Merges are exact the same way.
struct Sums {
  static constexpr int K = 4;
  __device__ static void identity(float (&a)[K]) { a[0] = a[1] = a[2] = a[3] = 0.0f; }
  // a[k] += b exactly: the rounding error goes to a[k + 2] (with b_rest).
  __device__ static void add_exact(float (&a)[K], int k, float b, float b_rest) {
    const float s = a[k] + b, b_part = s - a[k];
    const float err = (a[k] - (s - b_part)) + (b - b_part);
    a[k] = s;
    a[k + 2] = err + b_rest;
  }
  __device__ static void add(float (&a)[K], int k, float b) { a[k + 2] += b; }
  __device__ static void settle(float (&a)[K]) {
    add_exact(a, 0, a[2], 0.0f);
    add_exact(a, 1, a[3], 0.0f);
  }
  __device__ static void merge(float (&a)[K], const float (&b)[K]) {
    add_exact(a, 0, b[0], a[2] + b[2]);
    add_exact(a, 1, b[1], a[3] + b[3]);
  }
  __device__ static float total(const float (&a)[K], int k) { return a[k] + a[k + 2]; }
};

template <class T, int VEC>
struct GradSource : Sums {
  const T *dy, *x, *y;
  const uint32_t *mask;
  const float *mean;
  int64_t numel;
  int relu;
  // Items per batch: 16-bit items (two 16-byte loads each) two at a time, so
  // a thread's unpacked batch fits the registers of 3 blocks per SM; fp32
  // vectors three at a time (four spill 24 bytes under 64 registers since
  // the sums are two floats each; six 16-byte loads per thread still keep
  // ~100 KB in flight per SM).
  static constexpr int kBatch = VEC == 1 ? 8 : sizeof(T) == 2 ? 2 : 3;
  // Channels-last rows are added one channel at a time (add_rows unpacks a
  // channel's U values, not the whole batch), three rows at a time (in
  // 16-bit 8-byte vectors at 4 blocks per SM, below, four rows spilled bf16
  // 160 bytes; six at 3 blocks ran slower).
  static constexpr int kRowBatch = VEC > 1 && sizeof(T) == 2 ? 3 : kBatch;
  // Channels-last 16-bit rows by columns: 8-byte vectors (4 channels' sums a
  // thread) at 4 blocks per SM (64 registers; bf16 spills 8 bytes), not
  // 16-byte ones at 2 (106 registers; their sums spilled at 3). Two fp16
  // tensors read in this kernel's order took 1.20-1.22x a flat read's time
  // with 2 blocks per SM and 1.00-1.03x with 4 (bench/experiments/
  // read_patterns.cu). H200, same-run A/B (bench/results/
  // h200-2026-12-03-session48-trials.txt): NHWC 16-bit backwards
  // 0.957-0.991x the time (7 x 7 0.96-0.98x, 14 x 14 0.97-0.98x); 6 rows at
  // 3 blocks 1.00-1.04x. (An earlier trial of 8-byte vectors, its block
  // count not recorded, ran up to 7% slower: h200-2026-11-25-batch-norm-
  // narrow-vectors.txt.)
  static constexpr int kFirstMinBlocks = 4, kLastMinBlocks = sizeof(T) == 2 ? 4 : 3;
  static constexpr int kLastMaxVec = kNarrowVec<T>;
  // Channels-first rows by columns (n rows of c * s, few and long: NCHW 7 x
  // 7): 16-bit vectors of half the width, whose sums fit 3 blocks per SM
  // unspilled (74 registers). H200, same-run A/B: NCHW 7 x 7 16-bit
  // backward 6-7% faster, 14 x 14 within 0.5%; 16-byte vectors two rows at
  // a time at 3 blocks (a 60-byte spill) ran the same, four 8-byte rows at a
  // time 1-4% slower.
  static constexpr int kLongRowMaxVec = kNarrowVec<T>;
  static constexpr int kLongRowMinBlocks = 3;
  // Lanes of a block across a channels-first row (reduce): 64, two warps
  // side by side on one row, where 32 gave each warp rows of its own. H200,
  // two same-run sweeps of 8 to 256 lanes, against 32 (bench/results/
  // h200-2026-11-29-bn-row-tile.txt): NCHW 7 x 7 backward 16-bit
  // 0.984-0.990x the time, fp32 0.986-0.989x; 14 x 14 16-bit 0.990-0.997x;
  // 8 and 16 lanes 1.03-1.24x, 128 and 256 up to 1.15x.
  static constexpr int kLongRowTile = 64;
  struct Item {
    Pack<T, VEC> g, x;
    uint32_t gate;  // bit j: element j's gradient passes the ReLU
  };
  __device__ float context(int64_t ch) const { return mean[ch]; }
  __device__ Item load(int64_t e) const {
    return {load_pack<T, VEC>(dy, e), load_pack<T, VEC>(x, e), relu ? gate_bits<T, VEC>(y, mask, e, numel) : kGateOpen};
  }
  __device__ Item load_tail(int64_t e, int64_t n) const {
    return {load_pack_tail<T, VEC>(dy, e, n), load_pack_tail<T, VEC>(x, e, n),
            relu ? gate_bits<T, VEC>(y, mask, e, n) : kGateOpen};
  }
  // Each item is summed on its own, then the items pairwise and the batch to
  // the running sums: short dependency chains. Elements not in use (see
  // kPartialItems; add_rows: u >= valid) may never have been loaded: 0 *
  // garbage may be NaN, so they are selected away, not multiplied by 0.
  template <bool kPartialItems, int U>
  __device__ void add_items(float (&a)[K], const Item (&it)[U], const uint32_t (&use)[U], float m) const {
    float s0[U], s1[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float g[VEC], xf[VEC];
      unpack(it[u].g, g);
      unpack(it[u].x, xf);
      s0[u] = s1[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const bool in = !kPartialItems || ((use[u] >> j) & 1u);
        const float gj = in && ((it[u].gate >> j) & 1u) ? g[j] : 0.0f, dx = in ? xf[j] - m : 0.0f;
        s0[u] += gj;
        s1[u] = fmaf(gj, dx, s1[u]);
      }
      if (!kPartialItems) {
        s0[u] = use[u] ? s0[u] : 0.0f;
        s1[u] = use[u] ? s1[u] : 0.0f;
      }
    }
    add(a, 0, sum_of(s0));
    add(a, 1, sum_of(s1));
  }
  static constexpr bool kSpans = true;  // reduce_spans where make_plan allows it
  // Channels-first spans (reduce_spans): items u < valid in use, each with
  // elements [0, split) of one channel (mean m[0], sums a[0]) and [split,
  // VEC) of the next (m[1], a[1]). pa and pb = gj - pa split each gradient
  // exactly (one of the two is 0).
  template <int U>
  __device__ void add_split(float (&a)[2][K], const Item (&it)[U], int valid, int split, const float (&m)[2]) const {
    // One chain per sum: a batch is 32 elements, and this kernel is far from
    // its issue limit; per-item sums (add_items) spilled at 3 blocks per SM.
    float s0[2] = {0.0f, 0.0f}, s1[2] = {0.0f, 0.0f};
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float g[VEC], xf[VEC];
      unpack(it[u].g, g);
      unpack(it[u].x, xf);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        // Items u >= valid were not loaded: 0 * garbage may be NaN, so both
        // factors are selected away.
        const bool first = j < split, in = u < valid;
        const float gj = in && ((it[u].gate >> j) & 1u) ? g[j] : 0.0f;
        const float pa = first ? gj : 0.0f, pb = gj - pa, dx = in ? xf[j] - (first ? m[0] : m[1]) : 0.0f;
        s0[0] += pa;
        s0[1] += pb;
        s1[0] = fmaf(pa, dx, s1[0]);
        s1[1] = fmaf(pb, dx, s1[1]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      add(a[h], 0, s0[h]);
      add(a[h], 1, s1[h]);
    }
  }
  template <bool kFull, int U>
  __device__ void add_rows(float (&a)[VEC][K], const Item (&it)[U], int valid, const float (&m)[VEC]) const {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const bool in = kFull || u < valid;
        const float gj = in && ((it[u].gate >> j) & 1u) ? element(it[u].g, j) : 0.0f;
        const float dx = in ? element(it[u].x, j) - m[j] : 0.0f;
        s0 += gj;
        s1 = fmaf(gj, dx, s1);
      }
      add(a[j], 0, s0);
      add(a[j], 1, s1);
    }
  }
};

// What the finalize kernel does with a channel's merged result.
template <class T>
struct StatsFinish {
  const T *x;
  int64_t shift_stride;
  float epsilon, momentum;
  double count;  // values per channel
  const float *gamma, *beta;
  float *running_mean, *running_var, *saved_mean, *saved_rstd;
  Coef *coef;
  // What finish reads besides the merged state: inputs that no kernel of the
  // call writes, so the kernels load them before they wait for the state.
  struct Inputs {
    float shift, gamma, beta, running_mean, running_var;
  };
  __device__ Inputs load(int64_t ch) const {
    return {channel_shift(x, ch, shift_stride), gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f,
            running_mean ? running_mean[ch] : 0.0f, running_mean ? running_var[ch] : 0.0f};
  }
  // The channel's statistics outputs (saved and running) and its coefficients.
  __device__ Coef finish(int64_t ch, const float (&a)[Welford::K], bool write_stats, const Inputs &in) const {
    const float shift = in.shift;
    const float mean = shift + a[1];
    const float var = float(double(a[2]) / count);
    const float rstd = 1.0f / sqrtf(var + epsilon);
    if (write_stats) {
      if (saved_mean) saved_mean[ch] = mean;
      if (saved_rstd) saved_rstd[ch] = rstd;
      if (running_mean) {
        const float unbiased = float(double(a[2]) / (count - 1.0));
        running_mean[ch] = (1.0f - momentum) * in.running_mean + momentum * mean;
        running_var[ch] = (1.0f - momentum) * in.running_var + momentum * unbiased;
      }
    }
    const float scale = in.gamma * rstd;
    return Coef{shift, scale, in.beta - a[1] * scale, 0.0f};
  }
  __device__ void operator()(int64_t ch, const float (&a)[Welford::K], const Inputs &in) const {
    coef[ch] = finish(ch, a, true, in);
  }
};

struct GradFinish {
  float count;
  const float *gamma, *mean, *rstd;
  float *dgamma, *dbeta;
  Coef *coef;
  // gamma and the saved statistics: written before the call (as StatsFinish::Inputs).
  struct Inputs {
    float gamma, mean, rstd;
  };
  __device__ Inputs load(int64_t ch) const { return {gamma ? gamma[ch] : 1.0f, mean[ch], rstd[ch]}; }
  __device__ void operator()(int64_t ch, const float (&a)[Sums::K], const Inputs &in) const {
    const float r = in.rstd, sum_g = Sums::total(a, 0);
    const float dg = Sums::total(a, 1) * r;  // sum g * xhat
    if (dbeta) dbeta[ch] = sum_g;
    if (dgamma) dgamma[ch] = dg;
    const float k = in.gamma * r;
    coef[ch] = Coef{in.mean, k, -k * r * dg / count, -k * sum_g / count};
  }
};

// Butterfly merge over each aligned run of `width` lanes (a power of two up
// to the warp): every lane ends with the run's merged state, merged in the
// same order on every run (deterministic).
template <class Op>
__device__ __forceinline__ void warp_merge(float (&a)[Op::K], int width) {
  for (int o = width / 2; o > 0; o /= 2) {
    float b[Op::K];
#pragma unroll
    for (int k = 0; k < Op::K; ++k) b[k] = shfl_xor(a[k], o, width);
    Op::merge(a, b);
  }
}

// Merge of the states of each aligned group of `group` threads (a power of
// two, the same for the whole block; one channel per group) into the group's
// first thread, in a fixed order: a butterfly inside each warp, then the
// group's warps in order through shared memory.
template <class Op>
__device__ void group_merge(float (&a)[Op::K], int group) {
  __shared__ float warp_part[kMaxWarpsPerBlock][Op::K];
  warp_merge<Op>(a, min(group, kWarpSize));
  if (group <= kWarpSize) return;  // the same for every thread of the block
  if (lane_id() == 0)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) warp_part[warp_id()][k] = a[k];
  __syncthreads();
  if (int(threadIdx.x) % group == 0)
    for (int w = warp_id() + 1; w < warp_id() + group / kWarpSize; ++w) Op::merge(a, warp_part[w]);
}

// Batches a reduction thread adds between two settle() calls of its state
// (Sums: a[k + 2] holds at most this many batch sums).
constexpr int kSettleBatches = 16;

// Resident blocks per SM the reductions are compiled for (more warps keep
// more loads in flight), as many as fit without spilling: per source and
// kernel, Src::kFirstMinBlocks and Src::kLastMinBlocks. A cap of 64
// registers (4 blocks) matters: with 3 the compiler took up to 76 and the
// fp32 backward reduction of 256x256x56x56 on the H100 ran at 82% of DRAM
// bandwidth against 92% with 60. The ragged channels-first variant takes 3.
template <class Src, bool RAGGED>
inline constexpr int kReduceFirstMinBlocks = RAGGED ? 3 : Src::kFirstMinBlocks;

// Channels-first reduction: a group of `group` threads (a power of two up to
// the block; kThreads / group channels per block, so that small channels do
// not leave a whole block a few loads each) with its part of the channel
// walks its share of the channel's n * slots vectors flat, kBatch at a time. Partial results go to
// partials[part][channel][K]. A plane (n, channel) is `slots` vectors: s / VEC
// when s is a multiple of VEC; otherwise (RAGGED: large planes, or small ones
// with few samples; see make_plan) the aligned vectors that overlap the
// plane, their other elements unused, so the loads stay 16 bytes wide (the
// sectors they touch are the plane's anyway).
template <class Src, int VEC, bool RAGGED>
__global__ void __launch_bounds__(kThreads, (kReduceFirstMinBlocks<Src, RAGGED>))  // () for macro forms
    reduce_channels_first(Shape sh, Src src, int parts, FastDivider div_parts, int slots, FastDivider div_slots,
                          int group, float *partials) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  using Op = Src;
  constexpr int U = Src::kBatch;
  constexpr uint32_t kAll = (1u << VEC) - 1u;
  const int64_t ch = int64_t(blockIdx.x / parts) * (kThreads / group) + threadIdx.x / group;
  const int part = int(blockIdx.x % parts), t = int(threadIdx.x) % group;
  const int64_t total = sh.n * slots;
  const int64_t begin = int64_t(div_parts.div(uint64_t(total * part), false));
  const int64_t end = ch < sh.c ? int64_t(div_parts.div(uint64_t(total * (part + 1)), false)) : begin;
  const float context = ch < sh.c ? src.context(ch) : 0.0f;
  // Item i of the channel: slot k of plane n, whose first element is `plane`.
  auto locate = [&](int64_t i, int64_t &plane, int64_t &k) {
    const int64_t n = int64_t(div_slots.div(uint64_t(i), sh.small));
    plane = (n * sh.c + ch) * sh.s;
    k = i - n * slots;
  };
  float a[Op::K];
  Op::identity(a);
  int batches = 0;
  for (int64_t i0 = begin + t; i0 < end; i0 += int64_t(U) * group) {
    if (++batches % kSettleBatches == 0) Op::settle(a);
    typename Src::Item it[U];
    uint32_t use[U];
    if (!RAGGED && VEC > 1 && i0 + int64_t(U - 1) * group < end) {
      // A whole batch (all but a part's last): no per-item test, and the
      // count is the constant U * VEC (a power of two: no division). Not for
      // VEC == 1 (unaligned data), whose gradient kernels spilled with it.
#pragma unroll
      for (int u = 0; u < U; ++u) {
        int64_t plane, k;
        locate(i0 + int64_t(u) * group, plane, k);
        it[u] = src.load(plane + k * VEC);
        use[u] = kAll;
      }
      src.template add_items<false>(a, it, use, context);
      continue;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = i0 + int64_t(u) * group;
      use[u] = 0;
      if (i < end) {
        int64_t plane, k;
        locate(i, plane, k);
        if (!RAGGED) {
          it[u] = src.load(plane + k * VEC);
          use[u] = kAll;
        } else {
          const int64_t e = (plane / VEC + k) * VEC;  // the plane's elements are [lo, hi) of this vector
          const int64_t lo = plane - e, hi = plane + sh.s - e;
          if (hi > 0) {
            it[u] = e + VEC <= sh.numel ? src.load(e) : src.load_tail(e, sh.numel);
            use[u] = (hi >= VEC ? kAll : (1u << hi) - 1u) & (lo > 0 ? ~((1u << lo) - 1u) : kAll);
          }
        }
      }
    }
    src.template add_items<RAGGED>(a, it, use, context);
  }
  group_merge<Op>(a, group);
  if (t == 0 && ch < sh.c)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) partials[(int64_t(part) * sh.c + ch) * Op::K + k] = a[k];
}

// Column reduction: the tensor as rows (Shape), a state per column. Block
// (column tile, part): tx lanes across VEC-wide column vectors, ty down the
// part's chunks of rows, kRowBatch rows at a time; states merged over ty in shared
// memory, one per column to partials[part][column][K]. Channels-last, a
// column is a channel. Channels-first (rows of c * s), a column is one place
// of a channel's planes, and finalize merges the channel's s columns: for
// planes that are not whole vectors (7 x 7), where the channels-first kernel
// reads overlapping vectors and selects elements; every load is a whole
// vector of the row here, the copy kernel's access pattern.
// Slower on the H200 (same-run A/B, 7 x 7 to 28 x 28): issuing a batch's
// loads before adding the previous batch (7 x 7 backward +6-7%, forward
// +3%), 16-bit statistics two rows at a time at 4 blocks per SM (forward
// +1-4%), and more parts to fill whole waves when the column tiles outnumber
// one (NCHW 7 x 7 16-bit backward +1.5%). LONG_ROWS: channels-first rows
// (few, long), compiled for the source's kLongRowMinBlocks per SM.
template <class Src, int VEC, bool LONG_ROWS>
__global__ void __launch_bounds__(kThreads, LONG_ROWS ? Src::kLongRowMinBlocks : Src::kLastMinBlocks)
    reduce_columns(Shape sh, Src src, int tile, float *partials) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  using Op = Src;
  constexpr int U = Src::kRowBatch;
  __shared__ float tree[VEC][Op::K][kThreads];  // thread innermost: no bank conflicts
  const int part = int(blockIdx.y), parts = int(gridDim.y);
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col0 = (int64_t(blockIdx.x) * tile + tx) * VEC;
  const int64_t rows = sh.rows;
  // The parts take chunks of U * rows_step rows in turn (chunk part, part +
  // parts, ...), so the pass reads the tensor from its first row to its last
  // as time goes on: L2 then holds its last rows, where the rows kernels of
  // pass 2 start (they walk the rows backwards).
  const int64_t chunk = int64_t(U) * rows_step;
  float a[VEC][Op::K];
#pragma unroll
  for (int j = 0; j < VEC; ++j) Op::identity(a[j]);
  if (col0 < sh.row_len) {
    float context[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) context[j] = src.context(column_channel(sh, col0 + j));  // row_len % VEC == 0
    int batches = 0;
    for (int64_t r0 = part * chunk + ty; r0 < rows; r0 += parts * chunk) {
      if (++batches % kSettleBatches == 0)
#pragma unroll
        for (int j = 0; j < VEC; ++j) Op::settle(a[j]);
      typename Src::Item it[U];
      int valid = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t r = r0 + int64_t(u) * rows_step;
        if (r < rows) {
          it[u] = src.load(r * sh.row_len + col0);
          valid = u + 1;
        }
      }
      if (valid == U)  // every batch but the tensor's last
        src.template add_rows<true>(a, it, valid, context);
      else
        src.template add_rows<false>(a, it, valid, context);
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) tree[j][k][threadIdx.x] = a[j][k];
  __syncthreads();
  for (int h = rows_step / 2; h > 0; h /= 2) {
    if (ty < h)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float b[Op::K];
#pragma unroll
        for (int k = 0; k < Op::K; ++k) b[k] = tree[j][k][threadIdx.x + h * tile];
        Op::merge(a[j], b);
#pragma unroll
        for (int k = 0; k < Op::K; ++k) tree[j][k][threadIdx.x] = a[j][k];
      }
    __syncthreads();
  }
  if (ty == 0 && col0 < sh.row_len)
#pragma unroll
    for (int j = 0; j < VEC; ++j)
#pragma unroll
      for (int k = 0; k < Op::K; ++k) partials[(int64_t(part) * sh.row_len + col0 + j) * Op::K + k] = a[j][k];
}

// Samples a reduce_spans thread loads at a time, and its blocks per SM: 2
// and 4 (64 registers) ran 0.87-0.90x the column reduction's time on NCHW
// 7 x 7 and 14 x 14 16-bit backwards; 3 at 3 blocks 0.93-0.98x, 4 at 2
// blocks 1.02-1.09x, and a ring of 4 or 6 samples' vectors in shared memory
// filled by asynchronous copies 0.90-0.98x (H200, bench/results/
// h200-2026-12-03-session47-spans.txt).
constexpr int kSpanBatch = 2, kSpanMinBlocks = 4;

// Channels-first reduction by spans, for planes that are not whole vectors
// (7 x 7, 14 x 14): block (group, part) takes `group` channels and the
// samples part, part + parts, ...; the group's planes of one sample are one
// contiguous span of whole vectors (make_plan: spans_group), thread t reads
// vector t of each span, kSpanBatch samples at a time. That is a flat
// copy's access pattern; the column reduction's order (256 or 512 bytes of
// each of n rows of c * s) read the same two tensors 1.20x slower in
// bench/experiments/read_patterns.cu (H200, NCHW 14 x 14 fp16). A thread's
// vector lies in the same one or two channels in every sample, so it keeps a
// state for each; at the end each channel merges the states of the vectors
// that overlap it, in order, into partials[part][channel][K].
template <class Src, int VEC>
__global__ void __launch_bounds__(kThreads, kSpanMinBlocks)
    reduce_spans(Shape sh, Src src, int group, float *partials) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  using Op = Src;
  constexpr int U = kSpanBatch;
  __shared__ float states[2][Op::K][kThreads];
  const int part = int(blockIdx.y), parts = int(gridDim.y);
  const int64_t c0 = int64_t(blockIdx.x) * group;
  const int channels = int(min(int64_t(group), sh.c - c0));
  const int o = int(threadIdx.x) * VEC;  // the vector's first element in the span
  const bool active = o < channels * sh.s;
  // The vector's channels: q (elements [0, split)) and q + 1 (the rest).
  const int q = active ? o / int(sh.s) : 0;
  const int split = active ? int(min(int64_t(VEC), (q + 1) * sh.s - o)) : VEC;
  float a[2][Op::K];
  Op::identity(a[0]);
  Op::identity(a[1]);
  if (active) {
    const float m[2] = {src.context(c0 + q), split < VEC ? src.context(c0 + q + 1) : 0.0f};
    const int64_t first = c0 * sh.s + o, sample = sh.row_len;
    int batches = 0;
    for (int64_t n0 = part; n0 < sh.n; n0 += int64_t(U) * parts) {
      if (++batches % kSettleBatches == 0) {
        Op::settle(a[0]);
        Op::settle(a[1]);
      }
      typename Src::Item it[U];
      int valid = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t n = n0 + int64_t(u) * parts;
        if (n < sh.n) {
          it[u] = src.load(n * sample + first);
          valid = u + 1;
        }
      }
      src.add_split(a, it, valid, split, m);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) states[h][k][threadIdx.x] = a[h][k];
  __syncthreads();
  const int c = int(threadIdx.x);
  if (c < channels) {
    // Vectors v0..v1 overlap channel c; one that starts in channel c - 1
    // holds c's sums in its second state.
    const int begin = c * int(sh.s), v0 = begin / VEC, v1 = (begin + int(sh.s) - 1) / VEC;
    float r[Op::K];
    Op::identity(r);
    for (int v = v0; v <= v1; ++v) {
      const int h = v * VEC < begin ? 1 : 0;
      float b[Op::K];
#pragma unroll
      for (int k = 0; k < Op::K; ++k) b[k] = states[h][k][v];
      Op::merge(r, b);
    }
#pragma unroll
    for (int k = 0; k < Op::K; ++k) partials[(int64_t(part) * sh.c + c0 + c) * Op::K + k] = r[k];
  }
}

// States whose loads a finalize lane issues before it merges them: one
// round of L2 latency for up to 8 * tpc states, where a load per merge paid
// one per state (NCHW 14 x 14 16-bit, 196 states a channel: its forwards
// 2-2.7% faster on the H200). It doubles finalize's registers (32 -> 64),
// and the NHWC (16, 32, 112, 112) 16-bit backward ran 2% slower: likely no
// longer one early-launched finalize block beside that reduction's two.
constexpr int kFinalizeLoads = 8;

// Merges each channel's partials in a fixed order (deterministic, no float
// atomics): channel ch has `per` states in each part p, partials[((p * c +
// ch) * per + i) * K] (per = s for the column reduction of channels-first
// rows, else 1). `tpc` lanes per channel (a power of two up to the block)
// take every tpc-th of its parts * per states, in order, then a butterfly
// over each warp's lanes and the warps in order (group_merge); lane 0
// finishes. Finish's inputs are loaded while pass 1 drains, and pass 2 may
// launch once pass 1 is done (its blocks then wait in wait_for_prior_kernel
// beside these). H200, 96 training cases of the small shapes against one
// load per merge, inputs after the wait and no early launch: 0.5% less time
// in geometric mean. Done instead by pass 1's last block of each column tile
// (a ticket per tile; channels-last) it was slower: NHWC training ops 1.027x
// the time (7 x 7 forwards 1.003x), one block reading a tile's states in few
// lanes (H200, bench/results/h200-2026-12-03-session45-trials.txt, item 3).
template <class Op, class Finish>
__global__ void __launch_bounds__(kThreads)
    finalize(int64_t c, int parts, int per, int tpc, const float *partials, Finish finish) {
  constexpr int U = kFinalizeLoads;
  const int sub = int(threadIdx.x) % tpc;
  const int64_t ch = int64_t(blockIdx.x) * (blockDim.x / tpc) + threadIdx.x / tpc;
  typename Finish::Inputs in{};
  if (sub == 0 && ch < c) in = finish.load(ch);
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  allow_next_kernel();
  float a[Op::K];
  Op::identity(a);
  const int total = parts * per;
  if (ch < c)
    for (int q0 = sub; q0 < total; q0 += U * tpc) {
      float b[U][Op::K];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = q0 + u * tpc, part = q / per, i = q - part * per;
#pragma unroll
        for (int k = 0; k < Op::K; ++k)
          b[u][k] = q < total ? partials[((int64_t(part) * c + ch) * per + i) * Op::K + k] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (q0 + u * tpc < total) Op::merge(a, b[u]);
    }
  group_merge<Op>(a, tpc);
  if (sub == 0 && ch < c) finish(ch, a, in);
}

// ---------------------------------------------------------------------------
// Single pass (training forward, channels-first): one cooperative launch.
// ---------------------------------------------------------------------------

// Every block of a cooperative launch waits here until all have arrived.
// counter[0] counts arrivals, counter[1] departures; the last block to leave
// resets both, so they are 0 again for the next kernel on the stream.
__device__ void grid_barrier(unsigned *counter) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned blocks = gridDim.x;
    atomicAdd(counter, 1u);
    while (load_volatile_global(counter) < blocks) {
    }
    __threadfence();
    if (atomicAdd(counter + 1, 1u) == blocks - 1) {
      atomicExch(counter, 0u);
      atomicExch(counter + 1, 0u);
    }
  }
  __syncthreads();
}

constexpr int kSinglePassThreads = 1024;

// Copies a block's `count` contiguous vectors of x into its shared-memory
// tile all at once (4 loads in flight per thread), so DRAM latency is paid
// once, not once per plane or row; use(pack) sees each of the thread's
// vectors as it arrives, in order (v = t, t + blockDim.x, ...). A null tile:
// the loads for use() alone.
template <class T, int VEC, class Use>
__device__ __forceinline__ void load_tile(const Pack<T, VEC> *src, Pack<T, VEC> *tile, int count, Use use) {
  constexpr int U = 4;
  for (int v0 = threadIdx.x; v0 < count; v0 += U * int(blockDim.x)) {
    Pack<T, VEC> packs[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (v0 + u * int(blockDim.x) < count) packs[u] = load_global(src + v0 + u * int(blockDim.x));
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (v0 + u * int(blockDim.x) < count) {
        if (tile) tile[v0 + u * int(blockDim.x)] = packs[u];
        use(packs[u]);
      }
  }
  __syncthreads();
}

// load_tile's copy to shared memory split in two, where the backend copies
// without registers (kAsyncCopy): start_tile_copies starts every copy at
// once, in kTileGroups groups of each thread's consecutive vectors (v = t,
// t + blockDim.x, ...), and use_tile waits for them group by group, handing
// each vector to use() in load_tile's order (the same sums, the same bits)
// while the later groups land. Between the two a kernel may read other
// data. Why: through registers (U = 4 loads a thread) each warp alternates
// between waiting for its loads and working on them; this way the tile
// kernels' statistics overlap the copies still in flight (H200, session
// 53's trials: NHWC (16, 32, 112, 112) bn+relu forward fp16 22.98 -> 22.02
// us, fp32 30.05 -> 28.38, (8, 64, 112, 112) fp16 24.16 -> 22.27). The
// channels-first single pass, which starts on its tile only once all of it
// has landed, takes it this way too and ran as before (0.994-1.000x).
// Elsewhere use_tile is load_tile. The copies are the thread's own until
// the block's barrier at the end of use_tile.
constexpr int kTileGroups = 4;
template <class T, int VEC>
__device__ __forceinline__ void start_tile_copies(const Pack<T, VEC> *src, Pack<T, VEC> *tile, int count) {
  if constexpr (kAsyncCopy) {
    static_assert(sizeof(Pack<T, VEC>) == 16, "one 16-byte copy a vector");
    const int per_thread = (count + int(blockDim.x) - 1) / int(blockDim.x);
#pragma unroll
    for (int g = 0; g < kTileGroups; ++g) {
      for (int k = per_thread * g / kTileGroups; k < per_thread * (g + 1) / kTileGroups; ++k) {
        const int v = int(threadIdx.x) + k * int(blockDim.x);
        if (v < count) copy_async_16(tile + v, src + v);
      }
      async_copies_commit();
    }
  }
}
template <class T, int VEC, class Use>
__device__ __forceinline__ void use_tile(const Pack<T, VEC> *src, Pack<T, VEC> *tile, int count, Use use) {
  if constexpr (kAsyncCopy) {
    const int per_thread = (count + int(blockDim.x) - 1) / int(blockDim.x);
#pragma unroll
    for (int g = 0; g < kTileGroups; ++g) {
      async_copies_wait(kTileGroups - 1 - g);  // g unrolled: a constant
      for (int k = per_thread * g / kTileGroups; k < per_thread * (g + 1) / kTileGroups; ++k) {
        const int v = int(threadIdx.x) + k * int(blockDim.x);
        if (v < count) use(tile[v]);
      }
    }
    __syncthreads();
  } else {
    load_tile(src, tile, count, use);
  }
}

// The channels-last single passes' published states: channel ch's state of
// block b at block_stats[(ch * blocks + b) * kChannelStateFloats], padded to
// one 16-byte vector, stored and loaded whole. As three 4-byte stores each
// (a warp's lanes VEC channels, so VEC x blocks states, apart), publishing
// took the held kernel 13.2 us at 2048 channels; one vector store, 4.6 us
// (H200, 64x2048x7x7 fp16, the kernel stopped after each phase; the whole
// op 36.96 -> 26.91 us, 256x2048x7x7 62.72 -> 53.57; session 52's trials).
constexpr int kChannelStateFloats = 4;

// After the grid barrier: the warp's merge of a channel's `count` states
// states[(first + i * stride) * K], i = 0 .. count - 1, published by other
// blocks. Lane m takes i = m, m + W, ... in order, then a butterfly, so every
// block that merges a channel gets the same bits. The states are read
// through volatile loads (not from a stale L1), U states' loads issued
// before any is merged: a merge between loads made each load wait for the
// last (forward_single_pass_last, 132 states a channel: 67 -> 59 us), and
// with U = 8 a warp covers one state per block of a 132-SM grid in one round.
template <int KS = Welford::K>
__device__ __forceinline__ void merge_published_states(const float *states, int64_t count, int64_t first,
                                                       int64_t stride, float (&a)[Welford::K]) {
  constexpr int K = Welford::K, U = 8;
  static_assert(KS == K || KS == kChannelStateFloats, "states of K floats, or padded to one 16-byte vector");
  const int lane = lane_id();
  Welford::identity(a);
  for (int64_t i0 = 0; i0 < count; i0 += U * kWarpSize) {
    float part[U][K];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = i0 + u * kWarpSize + lane;
      const float *q = states + (first + i * stride) * KS;
      if constexpr (KS == kChannelStateFloats) {
        const float4 v = i < count ? load_coherent_float4(q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        part[u][0] = v.x, part[u][1] = v.y, part[u][2] = v.z;
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) part[u][k] = i < count ? load_volatile_global(q + k) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) Welford::merge(a, part[u]);
  }
  warp_merge<Welford>(a, kWarpSize);
}

// Block b owns a run of whole (n, c) planes, which it loads once into shared
// memory. Its warps then take each plane's Welford state (several warps per
// plane when the block has fewer planes than warps) and publish it. After the
// grid barrier, warp w merges the N states of its planes' channels
// (merge_published_states: every block that needs a channel computes it
// identically); the owner of plane (0, c) writes channel c's saved and
// running statistics. Last, the block normalizes its planes from shared
// memory and writes y and the mask (planes hold whole mask words: s % 32 ==
// 0). Shared memory: the planes' coefficients, then the tile.
template <class T, int VEC>
__global__ void __launch_bounds__(kSinglePassThreads)
    forward_single_pass(Shape sh, const T *x, const T *z, T *y, uint32_t *mask, int do_relu, StatsFinish<T> stats,
                        float *plane_stats, unsigned *counter) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  constexpr int K = Welford::K;
  extern __shared__ Coef smem_coef[];  // 16-byte aligned
  __shared__ float warp_state[kMaxWarpsPerBlock][K];
  const int64_t planes = sh.n * sh.c;
  const int64_t p0 = planes * blockIdx.x / gridDim.x, p1 = planes * (blockIdx.x + 1) / gridDim.x;
  const int own = int(p1 - p0), max_own = int((planes + gridDim.x - 1) / gridDim.x);
  const int vectors = int(sh.s / VEC);  // the tile fits in shared memory: small
  Coef *coef = smem_coef;
  Pack<T, VEC> *tile = reinterpret_cast<Pack<T, VEC> *>(smem_coef + max_own);
  const int lane = lane_id(), warp = warp_id(), warps = int(blockDim.x) / kWarpSize;
  // The block's planes are contiguous in x.
  const Pack<T, VEC> *src = reinterpret_cast<const Pack<T, VEC> *>(x + p0 * sh.s);
  start_tile_copies(src, tile, own * vectors);
  use_tile(src, tile, own * vectors, [](const Pack<T, VEC> &) {});
  // Per-plane states: `per_plane` warps on each of `groups` planes at a time.
  const int per_plane = own > 0 ? max(1, warps / own) : 1, groups = warps / per_plane;
  for (int base = 0; base < own; base += groups) {
    const int pl = base + warp / per_plane;
    float a[K];
    Welford::identity(a);
    if (warp < groups * per_plane && pl < own) {
      // Each vector's own mean and m2 (two passes), merged into the lane's state.
      const float shift = channel_shift(x, (p0 + pl) % sh.c, sh.s);
      for (int v = (warp % per_plane) * kWarpSize + lane; v < vectors; v += per_plane * kWarpSize) {
        float d[VEC], sum = 0.0f, m2 = 0.0f;
        unpack(tile[pl * vectors + v], d);
#pragma unroll
        for (int j = 0; j < VEC; ++j) sum += d[j] -= shift;
        const float mean = sum / float(VEC);
#pragma unroll
        for (int j = 0; j < VEC; ++j) m2 += (d[j] - mean) * (d[j] - mean);
        const float b[K] = {float(VEC), mean, m2};
        Welford::merge(a, b);
      }
    }
    warp_merge<Welford>(a, kWarpSize);
    if (lane == 0)
#pragma unroll
      for (int k = 0; k < K; ++k) warp_state[warp][k] = a[k];
    __syncthreads();
    if (int(threadIdx.x) < groups && base + int(threadIdx.x) < own) {
      float m[K];
      Welford::identity(m);
      for (int w = int(threadIdx.x) * per_plane; w < int(threadIdx.x + 1) * per_plane; ++w) Welford::merge(m, warp_state[w]);
#pragma unroll
      for (int k = 0; k < K; ++k) plane_stats[(p0 + base + threadIdx.x) * K + k] = m[k];
    }
    __syncthreads();
  }
  // Finish's inputs for the warp's first plane, loaded before the barrier.
  typename StatsFinish<T>::Inputs first_in{};
  if (lane == 0 && warp < own) first_in = stats.load((p0 + warp) % sh.c);
  grid_barrier(counter);
  // Each owned plane's channel: its N plane states, merged by one warp.
  for (int pl = warp; pl < own; pl += warps) {
    const int64_t p = p0 + pl, n = p / sh.c, ch = p - n * sh.c;
    float a[K];
    merge_published_states(plane_stats, sh.n, ch, sh.c, a);  // plane (m, ch) is state m * c + ch
    if (lane == 0) coef[pl] = stats.finish(ch, a, n == 0, pl == warp ? first_in : stats.load(ch));
  }
  __syncthreads();
  // Normalize: one flat, warp-uniform walk over the block's vectors, so a
  // mask word's lanes (all in one plane) are present together for the OR.
  const int count = own * vectors;
  for (int v0 = int(threadIdx.x) - lane; v0 < count; v0 += int(blockDim.x)) {
    const int v = v0 + lane, pl = v / vectors;
    const int64_t e = p0 * sh.s + int64_t(v) * VEC;
    uint32_t bits = 0;
    if (v < count) {
      const Coef k = coef[pl];
      float xf[VEC], zf[VEC], out[VEC];
      unpack(tile[v], xf);
      if (z) load_vec<T, VEC>(z + e, zf);
      bits = forward_vector<T>(xf, zf, z != nullptr, do_relu, VEC, [&](int) { return k; }, out);
      store_vec<T, VEC>(y + e, out);
    }
    if (mask) store_mask_word<VEC>(mask, e, bits, lane % (kWordBits / VEC), v < count);
  }
}

// Channels-first training forward as one kernel, one block per group of
// `group` whole channels (every sample's planes of them): the block copies
// its channels into shared memory, takes their statistics there and
// normalizes from there, so x is read once, no step is grid-wide (each
// channel is one block's) and there is no workspace. Where the two passes'
// three kernels cost more than their bytes (the table's rule takes tensors
// of up to about 20 MB at 7 x 7) it takes 0.66-1.04x their time; where a
// block's tile takes half an SM's shared memory or more, the SM's phases
// (copy, sums, normalize) do not overlap enough, and no form of it tried
// was faster than the two passes (H200, 256 x 2048 x 7 x 7 16-bit: 1.00x at
// best; sm90_batch_norm.cpp): forward_channel_groups_streamed, below, takes
// those in 16-bit without z.
// A sample's run of the group's planes (group * s elements at (n * c + first
// channel) * s) is whole 16-byte vectors, at most a block's (run_vectors):
// thread t keeps position p = t % run_vectors of the run in samples r, r +
// R, ... (r = t / run_vectors, R = threads / run_vectors), so element j of
// each of its vectors is always of the same channel (k0 below element b, k0
// + 1 from it; s >= VEC): its sums and coefficients are per element j, in
// registers, with no per-element choice of channel.
// Statistics in one pass, as the copies land: per element j, Welford's
// (count, mean, m2) of x - the channel's first element; merged per thread
// and channel part, then per channel over the threads in a fixed order (the
// same bits every run). The mask: each vector's bits are ORed into a copy of the run's words
// in shared memory, written out whole; the first and last words of a run,
// which neighbouring blocks share, are updated by atomics on their own bits
// only (AND then OR), whatever the word held. Shared memory: coefficients,
// finish's inputs, the tile, then the threads' states, whose room the mask
// words take once they are merged.
constexpr int kGroupThreads = 256, kGroupMinBlocks = 2;
constexpr int kGroupParts = 2 * Welford::K;  // a thread's states of its two channels
struct GroupLayout {
  int group, run_vectors, replicas, run_words;  // run_words: words a run's bits touch, at most
  int threads = kGroupThreads;                  // the block's
  int input_sets = 1;                           // StatsFinish inputs of this many groups
  __host__ __device__ static int words_of(int64_t run_elements) { return int((run_elements + kWordBits - 1) / kWordBits) + 1; }
  __host__ __device__ size_t coef_offset() const { return 0; }
  __host__ __device__ size_t inputs_offset() const { return size_t(group) * 16; }
  __host__ __device__ size_t tile_offset() const {
    return inputs_offset() + (size_t(input_sets) * group * sizeof(StatsFinish<float>::Inputs) + 15) / 16 * 16;
  }
  // The threads' states (kGroupParts floats each), then the mask words, in one room.
  __host__ __device__ size_t words_offset(int64_t n) const { return tile_offset() + size_t(n) * run_vectors * 16; }
  __host__ __device__ size_t bytes(int64_t n, bool mask) const {
    const size_t parts = size_t(threads) * kGroupParts * 4, bits = mask ? size_t(n) * run_words * 4 : 0;
    return words_offset(n) + (parts > bits ? parts : bits);
  }
};

// The block's shared memory as GroupLayout places it: coefficients, finish's
// inputs, the tile, the threads' states. Offsets in 16-byte units of the
// uint4 array, so nvcc knows the alignment (from a byte pointer it read each
// pack as 16 single bytes).
template <class T, int VEC>
struct GroupSmem {
  Coef *coef;
  typename StatsFinish<T>::Inputs *inputs;
  Pack<T, VEC> *tile;
  float *parts;
};
template <class T, int VEC>
__device__ __forceinline__ GroupSmem<T, VEC> group_smem_of(uint4 *smem, const GroupLayout &L, int64_t n) {
  return {reinterpret_cast<Coef *>(smem + L.coef_offset() / 16),
          reinterpret_cast<typename StatsFinish<T>::Inputs *>(smem + L.inputs_offset() / 16),
          reinterpret_cast<Pack<T, VEC> *>(smem + L.tile_offset() / 16),
          reinterpret_cast<float *>(smem + L.words_offset(n) / 16)};
}

// Channel k's state merged from the threads' (parts + kGroupParts * u: the
// state of channel k0(u), then of k0(u) + 1): warp k % warps, its lanes over
// the positions whose vectors hold some of channel k (p_lo .. p_hi) in every
// replica, in order, then a butterfly (the same bits every run).
template <int VEC>
__device__ __forceinline__ void group_channel_state(const float *parts, const GroupLayout &L, int s, int k,
                                                    float (&a)[Welford::K]) {
  const int p_lo = k * s / VEC, positions = ((k + 1) * s - 1) / VEC - p_lo + 1;
  Welford::identity(a);
  for (int q = lane_id(); q < L.replicas * positions; q += kWarpSize) {
    const int r = q / positions, p = p_lo + (q - r * positions);
    // Position p's vectors start in channel k (its first state) or in k - 1 (its second).
    const float *part = parts + kGroupParts * (r * L.run_vectors + p) + (p * VEC >= k * s ? 0 : Welford::K);
    const float b[Welford::K] = {part[0], part[1], part[2]};
    Welford::merge(a, b);
  }
  warp_merge<Welford>(a, kWarpSize);
}

// Vector i of a thread's (its (i + 1)-th) added to its per-element
// Welford state of d = x - center: all elements have the same count, so the
// weight 1 / (i + 1) is one correctly rounded reciprocal for the vector.
template <class T, int VEC>
__device__ __forceinline__ void add_vector_sums(const Pack<T, VEC> &pack, int i, const float (&center)[VEC],
                                                float (&mean)[VEC], float (&m2)[VEC]) {
  float v[VEC];
  unpack(pack, v);
  const float w = __frcp_rn(float(i + 1));
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float d = v[j] - center[j], delta = d - mean[j];
    mean[j] += delta * w;
    m2[j] += delta * (d - mean[j]);
  }
}

// A thread's per-element states (count per_thread, mean[j], m2[j]) merged
// into the parts of its two channels (element j < b is of the first).
template <int VEC>
__device__ __forceinline__ void write_thread_parts(float *parts, int per_thread, const float (&mean)[VEC],
                                                   const float (&m2)[VEC], int b) {
  constexpr int K = Welford::K;
  float a0[K], a1[K];
  Welford::identity(a0);
  Welford::identity(a1);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float part[K] = {float(per_thread), mean[j], m2[j]};
    if (j < b) Welford::merge(a0, part);
    else Welford::merge(a1, part);
  }
  float *mine = parts + kGroupParts * int(threadIdx.x);
#pragma unroll
  for (int k = 0; k < K; ++k) mine[k] = a0[k], mine[K + k] = a1[k];
}

// The group's channels' coefficients (and statistics outputs) from the
// threads' parts: warp k % warps merges channel k.
template <int VEC, class T>
__device__ __forceinline__ void group_coefficients(const float *parts, const GroupLayout &L, int s,
                                                   const StatsFinish<T> &stats, int64_t ch0,
                                                   const typename StatsFinish<T>::Inputs *inputs, Coef *coef) {
  const int warps = int(blockDim.x) / kWarpSize;
  for (int k = warp_id(); k < L.group; k += warps) {
    float a[Welford::K];
    group_channel_state<VEC>(parts, L, s, k, a);
    if (lane_id() == 0) coef[k] = stats.finish(ch0 + k, a, true, inputs[k]);
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kGroupThreads, kGroupMinBlocks)
    forward_channel_groups(Shape sh, const T *x, const T *z, T *y, uint32_t *mask, int do_relu, StatsFinish<T> stats,
                           GroupLayout L) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  extern __shared__ uint4 group_smem[];
  const auto [coef, inputs, tile, parts] = group_smem_of<T, VEC>(group_smem, L, sh.n);
  uint32_t *words = reinterpret_cast<uint32_t *>(parts);  // once the parts are merged
  const int t = int(threadIdx.x);
  const int64_t ch0 = int64_t(blockIdx.x) * L.group, run = int64_t(L.group) * sh.s;
  // The sample's run starts at element (n * c + ch0) * s.
  auto run_start = [&](int64_t n) { return (n * sh.c + ch0) * sh.s; };
  const int p = t % L.run_vectors, r = t / L.run_vectors;
  // Every copy at once, in kTileGroups groups of the thread's samples. (The
  // tile is under 227 KiB: its indices are ints.)
  const int per_thread = r < L.replicas ? int((sh.n - r + L.replicas - 1) / L.replicas) : 0;
  // The thread's i-th vector: element e0 + i * e_step of x, pack i * v_step of `mine`.
  const int64_t e0 = run_start(r) + int64_t(p) * VEC, e_step = int64_t(L.replicas) * sh.c * sh.s;
  Pack<T, VEC> *mine = tile + r * L.run_vectors + p;
  const int v_step = L.replicas * L.run_vectors;
#pragma unroll
  for (int gi = 0; gi < kTileGroups; ++gi) {
    for (int i = per_thread * gi / kTileGroups; i < per_thread * (gi + 1) / kTileGroups; ++i) {
      copy_async_16(mine + i * v_step, x + e0 + i * e_step);
    }
    async_copies_commit();
  }
  if (t < L.group) inputs[t] = stats.load(ch0 + t);
  __syncthreads();
  const int k0 = p * VEC / int(sh.s), b = min(VEC, (k0 + 1) * int(sh.s) - p * VEC);
  const int k1 = b < VEC ? k0 + 1 : k0;  // element j's channel: j < b ? k0 : k1
  // Statistics as the copies land, in one pass: per element j of the
  // thread's vectors, Welford's running mean and m2 of d = x - center
  // (center: the channel's first element, as StatsFinish has it).
  float center[VEC], mean[VEC], m2[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) center[j] = inputs[j < b ? k0 : k1].shift, mean[j] = m2[j] = 0.0f;
#pragma unroll
  for (int gi = 0; gi < kTileGroups; ++gi) {
    async_copies_wait(kTileGroups - 1 - gi);  // gi unrolled: a constant
    for (int i = per_thread * gi / kTileGroups; i < per_thread * (gi + 1) / kTileGroups; ++i)
      add_vector_sums(mine[i * v_step], i, center, mean, m2);
  }
  // Element j's (count, mean, m2), merged into its channel's part.
  write_thread_parts<VEC>(parts, per_thread, mean, m2, b);
  __syncthreads();
  group_coefficients<VEC>(parts, L, int(sh.s), stats, ch0, inputs, coef);
  __syncthreads();
  if (mask) {  // the parts' room becomes the mask words'
    for (int i = t; i < int(sh.n) * L.run_words; i += blockDim.x) words[i] = 0;
    __syncthreads();
  }
  // Normalize the thread's vectors from the tile, U at a time so that U
  // loads of z are in flight.
  Coef kj[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) kj[j] = coef[j < b ? k0 : k1];
  // Vector i's bits: elements e = e0 + i * e_step + j of the run that
  // starts at e - p * VEC, in sample r + i * R's copy of the words (e is a
  // multiple of VEC, as runs start at multiples of group * s: one word).
  uint32_t *my_words = words + r * L.run_words;
  const int w_step = L.replicas * L.run_words, p_elements = p * VEC;
  static_assert(kWordBits == 32, "e >> 5 is e's word");
  constexpr int U = 8;
  for (int i0 = 0; i0 < per_thread; i0 += U) {
    Pack<T, VEC> zp[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (z && i0 + u < per_thread) zp[u] = load_global(reinterpret_cast<const Pack<T, VEC> *>(z + e0 + (i0 + u) * e_step));
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u;
      if (i < per_thread) {
        const int64_t e = e0 + i * e_step;
        float xf[VEC], zf[VEC], out[VEC];
        unpack(mine[i * v_step], xf);
        if (z) unpack(zp[u], zf);
        const uint32_t bits = forward_vector<T>(xf, zf, z != nullptr, do_relu, VEC, [&](int j) { return kj[j]; }, out);
        store_vec<T, VEC>(y + e, out);
        if (mask) atomicOr(my_words + i * w_step + int((e >> 5) - ((e - p_elements) >> 5)), bits << (e & 31));
      }
    }
  }
  if (mask) {
    __syncthreads();
    // Thread t writes word t % run_words of samples t / run_words, + 256 / run_words, ...
    const int wi = t % L.run_words, n_step = kGroupThreads / L.run_words;
    const int64_t first_step = int64_t(n_step) * sh.c * sh.s;
    int64_t first = run_start(t / L.run_words);
    for (int n = t / L.run_words; n < sh.n && t < n_step * L.run_words; n += n_step, first += first_step) {
      const int64_t end = first + run, w = (first >> 5) + wi, w0 = w * kWordBits;
      if (w0 >= end) continue;
      const uint32_t v = words[n * L.run_words + wi];
      const int lo = int(max(first, w0) - w0);
      // The tensor's last word: its bits past the end are the run's (zero) too.
      const int hi = end == sh.numel ? kWordBits : int(min(end, w0 + kWordBits) - w0);
      if (lo == 0 && hi == kWordBits) {
        mask[w] = v;
      } else {
        const uint32_t own = (hi == kWordBits ? kGateOpen : (1u << hi) - 1u) & ~((1u << lo) - 1u);
        atomicAnd(mask + w, ~own | (v & own));
        atomicOr(mask + w, v & own);
      }
    }
  }
}

// forward_channel_groups for 16-bit tiles of half an SM's shared memory or
// more (n >= 128 at 7 x 7 and 14 x 14), where a block an SM ran its copy,
// sums and normalize one after another: persistent blocks of
// kStreamThreads walk groups blockIdx.x, + gridDim.x, ..., and each thread
// refills a vector of its tile with the next group's as soon as it has
// normalized it (the vectors are its own: no barrier), so the next group's
// copies land while this one's outputs are written, and adds each chunk of
// them to the next group's sums one chunk later, so only the last chunk's
// sums and the merge stand between two groups. H200, against the two
// passes: 256 x 2048 x 7 x 7 bn+relu forward fp16 55.9 -> 47.6 us (0.85x);
// without the overlapped sums 0.91x; one group a block (nothing overlapped)
// 1.00x (bench/results/h200-2026-12-04-session56-trials.txt). The mask: a
// 16-bit vector's 8 bits are one byte of the mask (little-endian words;
// runs start at multiples of 8 elements), stored as a byte: no shared
// words, no atomics. Not with z: its loads, through registers, made the
// Add+ReLU forward 1.02-1.37x the two passes' time in the forms tried.
constexpr int kStreamThreads = 512;
template <class T, int VEC>
__global__ void __launch_bounds__(kStreamThreads, 1)
    forward_channel_groups_streamed(Shape sh, const T *x, T *y, uint32_t *mask, int do_relu,
                                    StatsFinish<T> stats, GroupLayout L) {
  static_assert(VEC == 8 && sizeof(T) == 2, "a vector's mask bits are one byte");
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  using In = typename StatsFinish<T>::Inputs;
  extern __shared__ uint4 group_smem[];
  // (Structured bindings, which the lambdas below must not capture: C++17.)
  const auto [coef, inputs, tile, parts] = group_smem_of<T, VEC>(group_smem, L, sh.n);
  uint8_t *mask_bytes = reinterpret_cast<uint8_t *>(mask);
  const int t = int(threadIdx.x);
  const int64_t groups = sh.c / L.group, group_elements = int64_t(L.group) * sh.s;
  const int p = t % L.run_vectors, r = t / L.run_vectors;
  const int per_thread = r < L.replicas ? int((sh.n - r + L.replicas - 1) / L.replicas) : 0;
  // The thread's i-th vector of group g: element e0 + g * group_elements + i * e_step of x, pack i * v_step of `mine`.
  const int64_t e0 = r * sh.c * sh.s + int64_t(p) * VEC, e_step = int64_t(L.replicas) * sh.c * sh.s;
  Pack<T, VEC> *mine = tile + r * L.run_vectors + p;
  const int v_step = L.replicas * L.run_vectors;
  // Copies go in kTileGroups chunks of the thread's vectors, so the sums start on the first as the rest land.
  auto chunk_end = [&](int k) { return per_thread * (k + 1) / kTileGroups; };
  int64_t g = blockIdx.x;
  {
    const T *src = x + e0 + g * group_elements;
    int i = 0;
#pragma unroll
    for (int k = 0; k < kTileGroups; ++k) {
      for (; i < chunk_end(k); ++i) copy_async_16(mine + i * v_step, src + i * e_step);
      async_copies_commit();
    }
  }
  const int k0 = p * VEC / int(sh.s), b = min(VEC, (k0 + 1) * int(sh.s) - p * VEC);
  const int k1 = b < VEC ? k0 + 1 : k0;  // element j's channel: j < b ? k0 : k1
  // Statistics as the copies land: per element j of the thread's vectors,
  // Welford's running mean and m2 of d = x - center (center: the channel's
  // first element, as StatsFinish has it).
  float center[VEC], mean[VEC], m2[VEC];
  auto start_sums = [&](const In *in) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) center[j] = in[j < b ? k0 : k1].shift, mean[j] = m2[j] = 0.0f;
  };
  auto add_chunk = [&](int k) {
    for (int i = k == 0 ? 0 : chunk_end(k - 1); i < chunk_end(k); ++i)
      add_vector_sums(mine[i * v_step], i, center, mean, m2);
  };
  // inputs[2][group]: the current group's and the next's (thread t < group loads its channel's a group ahead).
  if (t < L.group) inputs[t] = stats.load(g * L.group + t);
  __syncthreads();
  start_sums(inputs);
#pragma unroll
  for (int k = 0; k < kTileGroups; ++k) {
    async_copies_wait(kTileGroups - 1 - k);  // k unrolled: a constant
    add_chunk(k);
  }
  for (int parity = 0; g < groups; g += gridDim.x, parity ^= 1) {
    const int64_t ch0 = g * L.group, base = e0 + g * group_elements, next = g + gridDim.x;
    const bool has_next = next < groups;
    In *in = inputs + parity * L.group, *in_next = inputs + (parity ^ 1) * L.group;
    In next_inputs{};
    if (t < L.group && has_next) next_inputs = stats.load(next * L.group + t);
    // The sums of the group's last chunk (the earlier ones were added while
    // the last group was normalized), then the block's per channel.
    async_copies_wait<0>();
    if (g != blockIdx.x) add_chunk(kTileGroups - 1);
    write_thread_parts<VEC>(parts, per_thread, mean, m2, b);
    __syncthreads();
    group_coefficients<VEC>(parts, L, int(sh.s), stats, ch0, in, coef);
    if (t < L.group && has_next) in_next[t] = next_inputs;
    __syncthreads();
    // Element j's coefficients (the forward's three: 8 registers fewer than
    // whole Coefs).
    float cj[VEC], aj[VEC], bj[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const Coef c = coef[j < b ? k0 : k1];
      cj[j] = c.center, aj[j] = c.a, bj[j] = c.b;
    }
    // Normalize chunk by chunk, each vector's slot then taking the next
    // group's copy; once chunk k's copies are started, the sums of the next
    // group's chunk k - 1 (started a chunk earlier).
    const T *src = x + e0 + next * group_elements;
    auto normalize = [&](int i, auto refill) {
      const int64_t e = base + int64_t(i) * e_step;
      float xf[VEC], out[VEC];
      unpack(mine[i * v_step], xf);
      const uint32_t bits = forward_vector<T>(xf, xf, false, do_relu, VEC,
                                              [&](int j) { return Coef{cj[j], aj[j], bj[j], 0.0f}; }, out);
      // One 16-byte store, through the helper (a Pack assigned here became
      // eight 2-byte stores, a uint4 four 4-byte ones).
      store_vec_streaming<T, VEC>(y + e, out);
      if (mask) mask_bytes[e >> 3] = uint8_t(bits);
      // After the store that used it (in order): the slot's next copy.
      if constexpr (decltype(refill)::value) copy_async_16(mine + i * v_step, src + int64_t(i) * e_step);
    };
    if (has_next) {
      start_sums(in_next);
#pragma unroll
      for (int k = 0; k < kTileGroups; ++k) {
        for (int i = k == 0 ? 0 : chunk_end(k - 1); i < chunk_end(k); ++i) normalize(i, std::true_type{});
        async_copies_commit();
        if (k > 0) {
          async_copies_wait<1>();
          add_chunk(k - 1);
        }
      }
    } else {
      for (int i = 0; i < per_thread; ++i) normalize(i, std::false_type{});
    }
  }
  // The tensor's last mask word: its bytes past the end are 0 (this block
  // wrote the last group's).
  if (mask && t == 0 && (groups - 1) % gridDim.x == blockIdx.x)
    for (int64_t q = sh.numel / 8; q % int64_t(sizeof(uint32_t)) != 0; ++q) mask_bytes[q] = 0;
}

// Publishes a block's state of channel ch (kChannelStateFloats, above).
__device__ __forceinline__ void publish_channel_state(float *block_stats, int ch, const float (&a)[Welford::K]) {
  *reinterpret_cast<float4 *>(block_stats + (int64_t(ch) * gridDim.x + blockIdx.x) * kChannelStateFloats) =
      make_float4(a[0], a[1], a[2], 0.0f);
}

// The grid phase of the channels-last single passes, after each block has
// published its states (publish_channel_state): each
// channel is merged once, by one warp somewhere in the grid (channel ch: warp
// ch % warps of block ch / warps, ...; merge_published_states), which writes
// its statistics and coefficients; a second barrier, and every block may read
// all c coefficients. With every block merging every channel itself (blocks
// x c states each, all from one small region of L2) forward_single_pass_last
// took 59 us against 30 for two passes (NHWC 16x32x112x112 fp16). Finish's
// inputs for the warp's first channel are loaded before the first barrier.
template <class T>
__device__ __forceinline__ void merge_channels_over_grid(int c, const float *block_stats, const StatsFinish<T> &stats,
                                                         unsigned *counter, Coef *channel_coef) {
  const int lane = lane_id(), warps = int(blockDim.x) / kWarpSize;
  const int first_ch = int(blockIdx.x) * warps + warp_id();
  typename StatsFinish<T>::Inputs first_in{};
  if (lane == 0 && first_ch < c) first_in = stats.load(first_ch);
  grid_barrier(counter);
  for (int ch = first_ch; ch < c; ch += int(gridDim.x) * warps) {
    float a[Welford::K];
    merge_published_states<kChannelStateFloats>(block_stats, gridDim.x, ch * int64_t(gridDim.x), 1, a);
    if (lane == 0) channel_coef[ch] = stats.finish(ch, a, true, ch == first_ch ? first_in : stats.load(ch));
  }
  grid_barrier(counter + 2);  // its own counters: blocks may reach it while the first one's last leaves
}

// The c coefficients (center, a, b), once a block, from channel_coef into
// shared memory as three float arrays of c + c / VEC (channel ch at ch + ch /
// VEC: a thread's VEC channels start at pk * (VEC + 1), an odd stride, so the
// lanes' first channels fall in different banks; as c Coefs of 16 bytes the
// lanes' runs started 128 bytes apart, in the same banks: ncu counted 9.4-way
// conflicts on the shared loads of NHWC (16, 32, 112, 112) fp16, 63% of their
// wavefronts); then the coefficients of the thread's pack pk of VEC channels
// into k. Each thread loading its own channels from L2 instead (a warp's
// loads touching 32 lines, every block the same 32 KiB) cost tens of
// microseconds (forward_single_pass_held, H200).
template <int VEC>
__device__ __forceinline__ void load_padded_coefficients(int c, const Coef *channel_coef, float *padded_coefs, int pk,
                                                         Coef (&k)[VEC]) {
  const int padded = c + c / VEC;
  for (int ch = int(threadIdx.x); ch < c; ch += int(blockDim.x)) {
    const float *q = reinterpret_cast<const float *>(channel_coef + ch);
    const int at = ch + ch / VEC;
    padded_coefs[at] = load_volatile_global(q);
    padded_coefs[padded + at] = load_volatile_global(q + 1);
    padded_coefs[2 * padded + at] = load_volatile_global(q + 2);
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const int at = pk * (VEC + 1) + j;
    k[j] = Coef{padded_coefs[at], padded_coefs[padded + at], padded_coefs[2 * padded + at], 0.0f};
  }
}

// Welford states of VEC channels that have seen the same number of values
// (one row of VEC channels at a time), so they share the count and its
// reciprocal. merge() is Welford::merge per channel.
template <int VEC>
struct RowWelford {
  float n = 0.0f, mean[VEC] = {}, m2[VEC] = {};
  __device__ __forceinline__ void add(const float (&v)[VEC]) {
    n += 1.0f;
    const float w = 1.0f / n;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = v[j] - mean[j];
      mean[j] += d * w;
      m2[j] += d * (v[j] - mean[j]);
    }
  }
  // Adds a pack of VEC channels' values less their shifts.
  template <class T>
  __device__ __forceinline__ void add_shifted(const Pack<T, VEC> &pack, const float (&shift)[VEC]) {
    float d[VEC];
    unpack(pack, d);
#pragma unroll
    for (int j = 0; j < VEC; ++j) d[j] -= shift[j];
    add(d);
  }
  __device__ __forceinline__ void merge(const RowWelford &b) {
    if (b.n == 0.0f) return;
    const float total = n + b.n, w = b.n / total;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = b.mean[j] - mean[j];
      mean[j] += d * w;
      m2[j] += b.m2[j] + d * d * n * w;
    }
    n = total;
  }
};

// The largest number of warps of a single-pass block (warps of the narrowest
// width), which sizes its per-warp shared state.
constexpr int kSinglePassMaxWarps = kSinglePassThreads / kMinWarpSize;

// Channels-last (n * s rows of c channels, c / VEC = `packs` vectors a row, a
// power of two up to the narrowest warp): block b owns a run of whole rows
// that starts on a mask word (runs of row_align rows), loaded once into
// shared memory. Thread t always takes vector t % packs of a row, so it
// keeps one Welford state for its VEC channels; the lanes of a warp with the
// same vector merge by a butterfly, then warp w merges channels w, w +
// warps, ... (a lane per warp state, a butterfly) and publishes the block's
// state, channel by channel (a channel's states adjacent: 32 lanes read 384
// contiguous bytes rather than 32 lines). After the grid barrier, one warp
// of the grid merges each channel's states of all blocks
// (merge_published_states) and writes its statistics and coefficients, and
// after a second barrier every block normalizes its rows from shared memory. Shared memory: the c coefficients,
// the tile, then the warps' states.
template <class T, int VEC>
__global__ void __launch_bounds__(kSinglePassThreads)
    forward_single_pass_last(Shape sh, const T *x, const T *z, T *y, uint32_t *mask, int do_relu,
                             StatsFinish<T> stats, float *block_stats, unsigned *counter, int row_align,
                             Coef *channel_coef) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  constexpr int K = Welford::K;
  static_assert(VEC >= 4, "the padded coefficient arrays fit in the room of c Coefs");
  extern __shared__ Coef smem_coef[];  // 16-byte aligned
  const int c = int(sh.c), packs = c / VEC;
  const int64_t units = (sh.rows + row_align - 1) / row_align;
  const int64_t r0 = min(sh.rows, units * blockIdx.x / gridDim.x * row_align);
  const int64_t r1 = min(sh.rows, units * (blockIdx.x + 1) / gridDim.x * row_align);
  const int max_rows = int((units + gridDim.x - 1) / gridDim.x * row_align);
  const int count = int((r1 - r0) * packs);
  // The coefficients the normalize phase reads (load_padded_coefficients:
  // three padded float arrays), in the room of c Coefs.
  float *const padded_coefs = reinterpret_cast<float *>(smem_coef);
  Pack<T, VEC> *tile = reinterpret_cast<Pack<T, VEC> *>(smem_coef + c);
  // [warp][c + 1]: a row of c + 1 floats (odd, as c is a multiple of VEC)
  // puts the warps' states of one channel in different banks.
  const int row = c + 1;
  float *warp_mean = reinterpret_cast<float *>(tile + int64_t(max_rows) * packs);  // [warp][row]
  float *warp_m2 = warp_mean + kSinglePassMaxWarps * row;                           // [warp][row]
  float *warp_n = warp_m2 + kSinglePassMaxWarps * row;                              // [warp][packs]
  const int lane = lane_id(), warp = warp_id(), warps = int(blockDim.x) / kWarpSize;
  {
    // The statistics come from the registers the tile is loaded through:
    // every vector of this thread is vector t % packs of its row
    // (blockDim.x is a multiple of packs), VEC fixed channels.
    const int pk = int(threadIdx.x) % packs;
    float shift[VEC];  // channel_shift of the thread's channels: row 0
    unpack(load_pack<T, VEC>(x, int64_t(pk) * VEC), shift);
    RowWelford<VEC> st;
    const Pack<T, VEC> *src = reinterpret_cast<const Pack<T, VEC> *>(x + r0 * c);
    start_tile_copies(src, tile, count);
    use_tile(src, tile, count, [&](const Pack<T, VEC> &pack) { st.add_shifted(pack, shift); });
    for (int o = packs; o < kWarpSize; o *= 2) {
      RowWelford<VEC> b;
      b.n = shfl_xor(st.n, o, kWarpSize);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        b.mean[j] = shfl_xor(st.mean[j], o, kWarpSize);
        b.m2[j] = shfl_xor(st.m2[j], o, kWarpSize);
      }
      st.merge(b);
    }
    if (lane < packs) {
      warp_n[warp * packs + lane] = st.n;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        warp_mean[warp * row + lane * VEC + j] = st.mean[j];
        warp_m2[warp * row + lane * VEC + j] = st.m2[j];
      }
    }
    __syncthreads();
    // Channel ch's warp states, one per lane, merged by a butterfly (a
    // serial merge of 32 states by one thread per channel left the other
    // warps waiting). With one round of loads per merge_published_states and
    // finish's inputs loaded before the barrier: NHWC (16, 32, 112, 112)
    // forwards 5-10% faster on the H200 (bn+relu fp16 28.0 -> 25.7 us).
    for (int ch = warp; ch < c; ch += warps) {
      float a[K];
      Welford::identity(a);
      if (lane < warps) {
        a[0] = warp_n[lane * packs + ch / VEC];
        a[1] = warp_mean[lane * row + ch];
        a[2] = warp_m2[lane * row + ch];
      }
      warp_merge<Welford>(a, kWarpSize);
      if (lane == 0) publish_channel_state(block_stats, ch, a);
    }
  }
  merge_channels_over_grid(c, block_stats, stats, counter, channel_coef);
  // Normalize: the flat walk of the channels-first kernel; a thread's vectors
  // are all vector t % packs of their rows, so its coefficients stay in
  // registers.
  Coef k[VEC];
  load_padded_coefficients<VEC>(c, channel_coef, padded_coefs, int(threadIdx.x) % packs, k);
  const int64_t e0 = r0 * c;
  for (int v0 = int(threadIdx.x) - lane; v0 < count; v0 += int(blockDim.x)) {
    const int v = v0 + lane;
    const int64_t e = e0 + int64_t(v) * VEC;
    uint32_t bits = 0;
    if (v < count) {
      float xf[VEC], zf[VEC], out[VEC];
      unpack(tile[v], xf);
      if (z) load_vec<T, VEC>(z + e, zf);
      bits = forward_vector<T>(xf, zf, z != nullptr, do_relu, VEC, [&](int j) { return k[j]; }, out);
      store_vec<T, VEC>(y + e, out);
    }
    if (mask) store_mask_word<VEC>(mask, e, bits, lane % (kWordBits / VEC), v < count);
  }
}

// Channels-last rows that forward_single_pass_last does not take (more than
// a warp's worth of vectors a row, or more rows than the tiles hold): packs
// = c / VEC a power of two up to the block. Block b owns a run of whole rows
// that starts on a mask word, as there, but holds only the first `held`
// vectors of it (a multiple of the block, what its shared memory takes) and
// reads the rest for the statistics only, then again to normalize it. The
// rest is what the block read last, so L2 still holds much of it, and the
// block normalizes it first, before its own stores of y push it out: x
// leaves DRAM about once where the tiles and L2 together hold it, where the
// two passes read it twice less what L2 kept between them.
// Thread t takes vector t % packs of each row (VEC fixed channels, one
// RowWelford); the block's row lanes t / packs merge by a tree in shared
// memory (a fixed order: every run gives the same bits), then the grid
// merges each channel as forward_single_pass_last does. Shared memory: the
// tile (`held_capacity` vectors), then the tree's half of the lanes' states,
// the room the block's coefficients take after it.
template <class T, int VEC>
__global__ void __launch_bounds__(kSinglePassThreads)
    forward_single_pass_held(Shape sh, const T *x, const T *z, T *y, uint32_t *mask, int do_relu,
                             StatsFinish<T> stats, float *block_stats, unsigned *counter, int row_align,
                             Coef *channel_coef, int held_capacity) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  constexpr int F = 2 * VEC + 1;        // a RowWelford's floats: n, then VEC means and VEC m2s
  extern __shared__ uint4 held_smem[];  // 16-byte aligned
  const int c = int(sh.c), packs = c / VEC, lanes = int(blockDim.x) / packs;
  const int64_t units = (sh.rows + row_align - 1) / row_align;
  const int64_t r0 = min(sh.rows, units * blockIdx.x / gridDim.x * row_align);
  const int64_t r1 = min(sh.rows, units * (blockIdx.x + 1) / gridDim.x * row_align);
  const int count = int((r1 - r0) * packs), held = min(count, held_capacity);
  Pack<T, VEC> *tile = reinterpret_cast<Pack<T, VEC> *>(held_smem);
  float *tree = reinterpret_cast<float *>(tile + held_capacity);  // [slot][F][packs]
  const Pack<T, VEC> *src = reinterpret_cast<const Pack<T, VEC> *>(x + r0 * c);
  const int pk = int(threadIdx.x) % packs, rl = int(threadIdx.x) / packs;
  const int lane = lane_id();
  {
    float shift[VEC];  // channel_shift of the thread's channels: row 0
    unpack(load_pack<T, VEC>(x, int64_t(pk) * VEC), shift);
    RowWelford<VEC> st;
    const auto add = [&](const Pack<T, VEC> &pack) { st.add_shifted(pack, shift); };
    // The tile, then the rest for the statistics only (held is a multiple of
    // the block, so each thread keeps its channels), through registers: with
    // start_tile_copies / use_tile the kernel was no faster (0.996-0.999x in
    // geometric mean; with the copies started before the rest was read,
    // 1.03-1.09x slower; H200, session 53's trials).
    load_tile(src, tile, held, add);
    load_tile(src + held, static_cast<Pack<T, VEC> *>(nullptr), count - held, add);
    // Row lanes [h, 2h) hand their states to lanes [0, h), h = lanes / 2 .. 1.
    for (int h = lanes / 2; h > 0; h /= 2) {
      if (rl >= h && rl < 2 * h) {
        float *q = tree + (rl - h) * F * packs + pk;
        q[0] = st.n;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          q[(1 + j) * packs] = st.mean[j];
          q[(1 + VEC + j) * packs] = st.m2[j];
        }
      }
      __syncthreads();
      if (rl < h) {
        const float *q = tree + rl * F * packs + pk;
        RowWelford<VEC> b;
        b.n = q[0];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          b.mean[j] = q[(1 + j) * packs];
          b.m2[j] = q[(1 + VEC + j) * packs];
        }
        st.merge(b);
      }
      __syncthreads();
    }
    if (rl == 0)
#pragma unroll
      for (int j = 0; j < VEC; ++j) publish_channel_state(block_stats, pk * VEC + j, {st.n, st.mean[j], st.m2[j]});
  }
  // As forward_single_pass_last, the coefficients into the tree's room.
  merge_channels_over_grid(c, block_stats, stats, counter, channel_coef);
  Coef k[VEC];
  load_padded_coefficients<VEC>(c, channel_coef, tree, pk, k);
  // Normalize the rest first (from L2, mostly), then the tile: warp-uniform
  // walks, so a mask word's lanes are present together for the OR, with U
  // vectors' loads (x of the rest, z) issued before any is used, as in
  // phase 1: one block an SM keeps too few loads in flight otherwise. y
  // goes out through streaming stores (evict-first in L2), so it pushes
  // fewer of the rest's lines out of L2 before they are read again (ncu,
  // H200, fp16 256x2048x7x7: 59.9 -> 56.9 MB read from DRAM; the op
  // 0.977-0.982x the time, session 54's trials).
  constexpr int U = 2;
  const int64_t e0 = r0 * c;
  const Pack<T, VEC> *zsrc = z ? reinterpret_cast<const Pack<T, VEC> *>(z + e0) : nullptr;
  auto normalize = [&](int from, int to, auto x_of) {
    for (int v0 = from + int(threadIdx.x) - lane; v0 < to; v0 += U * int(blockDim.x)) {
      Pack<T, VEC> xs[U], zs[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int v = v0 + u * int(blockDim.x) + lane;
        if (v < to) {
          xs[u] = x_of(v);
          if (z) zs[u] = load_global(zsrc + v);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int v = v0 + u * int(blockDim.x) + lane;
        const int64_t e = e0 + int64_t(v) * VEC;
        uint32_t bits = 0;
        if (v < to) {
          float xf[VEC], zf[VEC], out[VEC];
          unpack(xs[u], xf);
          if (z) unpack(zs[u], zf);
          bits = forward_vector<T>(xf, zf, z != nullptr, do_relu, VEC, [&](int j) { return k[j]; }, out);
          store_vec_streaming<T, VEC>(y + e, out);
        }
        if (mask) store_mask_word<VEC>(mask, e, bits, lane % (kWordBits / VEC), v < to);
      }
    }
  };
  normalize(held, count, [&](int v) { return load_global(src + v); });
  normalize(0, held, [&](int v) { return tile[v]; });
}

// ---------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------

int next_pow2(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

// Everything pass 1 and pass 2 need that depends on the call's pointers.
struct Plan {
  Shape sh;
  bool channels_last;
  bool reduce_columns;  // pass 1 by columns of the rows (reduce_columns), else reduce_channels_first
  int reduce_vec;       // elements per access in the reduction: 16 or 8 bytes' worth, or 1
  int apply_vec;        // > 1: the widest vector in the elementwise pass
  int spans_group;      // > 0: channels-first pass 1 by spans of this many channels, where the source has it
};

// Channels-first planes that are not whole vectors (7 x 7) are reduced by
// columns when they are small (on large planes the overlapping vectors of
// reduce_channels_first cost little) and there are enough rows (samples):
// the per-column partials, 12 or 16 bytes per column and part, are then
// under a tenth of a column's data (n * sizeof(T) bytes of x, and as much of
// dy). The plane limit also keeps finalize's parts * s states in an int.
constexpr int64_t kColumnReduceMinBytes = 128, kColumnReduceMaxPlane = 4096;

// Channels per block of reduce_spans: the most whose planes make a span of
// whole vec-wide vectors (a multiple of vec / gcd(s, vec), the samples' own
// planes starting at whole vectors too) of at most one per thread, or all
// c where they fit; 0 where no group fits or a vector could touch three
// channels (s < vec). XVK_BATCH_NORM_SPANS=0 turns the kernel off, so the
// benchmark and the tests can run the column reduction on the same shapes.
int64_t spans_group(int64_t c, int64_t s, int vec) {
  static const int override = env_switch("XVK_BATCH_NORM_SPANS");
  if (override == 0 || s < vec || (c * s) % vec != 0) return 0;
  const int64_t most = int64_t(kThreads) * vec;
  if (c * s <= most) return c;
  const int64_t unit = vec / std::gcd(s, int64_t(vec));
  return most / s / unit * unit;
}

// The widest of vec, vec / 2 and 1 that divides `len`.
int widest_dividing(int64_t len, int vec) { return len % vec == 0 ? vec : len % (vec / 2) == 0 ? vec / 2 : 1; }

template <class T>
Plan make_plan(int64_t n, int64_t c, int64_t s, bool channels_last, std::initializer_list<const void *> ptrs) {
  Plan p;
  p.sh = make_shape(n, c, s, channels_last);
  p.channels_last = channels_last;
  constexpr int vec = kMaxVec<T>;
  bool aligned = true;
  for (const void *q : ptrs) aligned = aligned && (!q || aligned_to(q, kVectorBytes));
  // Pass 2's vector width depends on the pointers alone; its rows kernels
  // also need rows of whole vectors, which forward_typed and backward_typed
  // check where they choose them. Pass 1 by columns needs rows of whole
  // vectors; channels-first reads planes that are not whole vectors as the
  // aligned vectors that overlap them.
  p.apply_vec = aligned ? vec : 1;
  p.reduce_columns = channels_last || (aligned && s % vec != 0 && s <= kColumnReduceMaxPlane &&
                                        n * int64_t(sizeof(T)) >= kColumnReduceMinBytes);
  p.reduce_vec = !aligned ? 1 : !p.reduce_columns ? vec : widest_dividing(p.sh.row_len, vec);
  p.spans_group = !channels_last && p.reduce_columns ? int(spans_group(c, s, vec)) : 0;
  return p;
}

// Whether every vec-wide vector of the flat walk lies in one channel: the
// flat kernels' UNIFORM.
bool vectors_in_one_channel(const Plan &p, int vec) { return p.channels_last ? vec == 1 : p.sh.s % vec == 0; }

// pick(IntConst<SETS>{}) with the rows kernels' SETS (ColumnCoefs) for
// VEC-wide column vectors: the kernel instance for them.
template <int VEC, class Pick>
auto rows_kernel_for(const Plan &p, Pick pick) {
  if (vectors_in_one_channel(p, VEC)) return pick(IntConst<1>{});
  if (!p.channels_last && p.sh.s >= VEC) return pick(IntConst<2>{});
  return pick(IntConst<VEC>{});
}

// Blocks per grid row so that `rows_of_blocks` such rows are at most one
// resident wave: a second, partial wave would leave most SMs idle while it
// runs (c = 256 with ceil(1056 / 256) = 5 parts ran 1.2 waves, as slow as 2).
int64_t one_wave(Context &ctx, int resident_per_sm, int64_t rows_of_blocks) {
  return std::max<int64_t>(1, int64_t(ctx.info->sm_count) * resident_per_sm / rows_of_blocks);
}

// Workspace: c coefficients (16-byte aligned), then the partials.
struct Workspace {
  Coef *coef;
  float *partials;
};

xvk_status_t workspace_for(Context &ctx, int64_t c, int64_t partial_floats, Workspace &w) {
  void *base = nullptr;
  const size_t coef_bytes = size_t(c) * sizeof(Coef);
  error_t e = ctx.workspace(coef_bytes + size_t(partial_floats) * sizeof(float), &base);
  if (e != kSuccess) return device_error("allocating the workspace", e);
  w.coef = static_cast<Coef *>(base);
  w.partials = reinterpret_cast<float *>(static_cast<char *>(base) + coef_bytes);
  return XVK_SUCCESS;
}

// Pass 1 for either source, then the finalize kernel; `make_finish(coef)`
// builds the Finish functor. Returns the coefficients through coef_out.
template <class T, template <class, int> class Source, class SourceInit, class MakeFinish>
xvk_status_t reduce(Context &ctx, const Plan &p, SourceInit init, MakeFinish make_finish, Coef **coef_out) {
  const Shape &sh = p.sh;
  xvk_status_t status = XVK_ERROR_INTERNAL;
  int parts = 1, per = 1;  // partial states: parts x per per channel (finalize)
  // reduce_spans, where the plan allows it and the source has it (always
  // with the widest vectors: `vec` below).
  const bool by_spans = Source<T, 1>::kSpans && p.spans_group > 0;
  Workspace w{};
  auto run = [&](auto vec_tag) {
    constexpr int VEC = decltype(vec_tag)::value;
    using Src = Source<T, VEC>;
    Src src{};
    init(src);
    if (by_spans) {
      if constexpr (Src::kSpans && VEC == kMaxVec<T>) {
        auto kernel = reduce_spans<Src, VEC>;
        // One wave of blocks: two waves ran 1.01-1.05x slower (h200-2026-12-03-session47-spans.txt).
        const int64_t groups = (sh.c + p.spans_group - 1) / p.spans_group;
        parts = int(std::min<int64_t>({sh.n, one_wave(ctx, ctx.blocks_per_sm(kernel, kThreads, 0), groups), 65535}));
        status = workspace_for(ctx, sh.c, int64_t(parts) * sh.c * Src::K, w);
        if (status != XVK_SUCCESS) return;
        status = launch_kernel(ctx, "batch_norm reduce (spans)", kernel, dim3(unsigned(groups), unsigned(parts)),
                               dim3(kThreads), 0, sh, src, p.spans_group, w.partials);
      }
    } else if (!p.reduce_columns) {
      const bool ragged = sh.s % VEC != 0;
      auto kernel = ragged ? reduce_channels_first<Src, VEC, true> : reduce_channels_first<Src, VEC, false>;
      // Vectors per plane: ragged planes overlap at most ceil((s + VEC - 1) / VEC) aligned vectors.
      const int64_t slots = ragged ? (sh.s + 2 * VEC - 2) / VEC : sh.s / VEC;
      // Threads per channel: the largest power of two up to the block that
      // still gives each thread 4 batches; then one wave of blocks in all,
      // each group at least a few batches of work.
      const int64_t total = sh.n * slots;
      int group = kThreads;
      while (group > 1 && total < int64_t(group) * Src::kBatch * 4) group /= 2;
      const int64_t groups = (sh.c + kThreads / group - 1) / (kThreads / group);  // blocks per part
      parts = int(std::max<int64_t>(1, std::min<int64_t>({one_wave(ctx, ctx.blocks_per_sm(kernel, kThreads, 0), groups),
                                                          total / (int64_t(group) * Src::kBatch), 4096})));
      status = workspace_for(ctx, sh.c, int64_t(parts) * sh.c * Src::K, w);
      if (status != XVK_SUCCESS) return;
      const FastDivider div_slots{uint64_t(slots)};
      status = launch_kernel(ctx, "batch_norm reduce (channels-first)", kernel, dim3(unsigned(groups * parts)),
                             dim3(kThreads), 0, sh, src, parts, FastDivider(uint64_t(parts)), int(slots), div_slots,
                             group, w.partials);
    } else {
      const int64_t col_vectors = (sh.row_len + VEC - 1) / VEC;
      // Lanes across a row: a warp channels-last (rows of c), the source's
      // kLongRowTile on channels-first rows (n rows of c * s).
      const int tile = std::min(p.channels_last ? 32 : Src::kLongRowTile, next_pow2(col_vectors));
      const int rows_step = kThreads / tile;
      const int64_t tiles = (col_vectors + tile - 1) / tile;
      const auto launch = [&](auto kernel) {
        parts = int(std::max<int64_t>(1, std::min<int64_t>({sh.rows / (int64_t(rows_step) * Src::kRowBatch),
                                                            one_wave(ctx, ctx.blocks_per_sm(kernel, kThreads, 0), tiles),
                                                            65535})));
        status = workspace_for(ctx, sh.c, int64_t(parts) * sh.row_len * Src::K, w);
        if (status != XVK_SUCCESS) return;
        status = launch_kernel(ctx, "batch_norm reduce (columns)", kernel, dim3(unsigned(tiles), unsigned(parts)),
                               dim3(kThreads), 0, sh, src, tile, w.partials);
      };
      // Both layouts share one instance where the source's two block bounds
      // agree; `vec` below keeps each layout within its source's widest vector.
      constexpr bool kLongRows = Src::kLongRowMinBlocks != Src::kLastMinBlocks;
      if (p.channels_last) {
        if constexpr (VEC <= Src::kLastMaxVec) launch(reduce_columns<Src, VEC, false>);
      } else if constexpr (VEC <= Src::kLongRowMaxVec) {
        launch(reduce_columns<Src, VEC, kLongRows>);
      }
      per = int(sh.inner);
    }
    if (status != XVK_SUCCESS) return;
    // Lanes per channel: up to a warp; more (up to the block, merged across
    // warps) while the finalize grid is under one block per SM and each
    // lane still has over two states. Few channels of many states, NHWC
    // (16, 32, 112, 112) backward (32 channels, 264 parts): 4 blocks of 32
    // lanes each loaded 9 states that lie 512 bytes apart, 32 lines per
    // warp load on 4 SMs, 10.3 us (ncu, H100); 32 blocks of 256 lanes
    // spread that over 32 SMs: its backwards 0.90-0.92x the time (H100,
    // bench/results/h100-2026-11-27-batch-norm-finish.txt). By the plan's
    // arithmetic the channels-last 112 x 112, 56 x 56 and 28 x 28 ResNet
    // shapes (64 to 512 channels of one to four hundred states) and the
    // channels-first 14 x 14 one (1024 of 196) take more lanes too: their
    // training times in the next full table against the one before (other
    // H100 runs, not an A/B) were 0-1.2% lower and within +-0.5%. Where the
    // loop stops at once, the merge order and the results are as before.
    const int64_t states = int64_t(parts) * per;
    const auto finalize_blocks = [&](int lanes) { return (sh.c + kThreads / lanes - 1) / (kThreads / lanes); };
    int tpc = std::min<int64_t>(32, next_pow2(states));
    while (tpc < kThreads && int64_t(tpc) * 2 < states && finalize_blocks(tpc) < int64_t(ctx.info->sm_count))
      tpc *= 2;
    auto fin = finalize<Src, decltype(make_finish(w.coef))>;
    status = launch_kernel(ctx, "batch_norm finalize", fin, dim3(unsigned(finalize_blocks(tpc))),
                           dim3(kThreads), 0, sh.c, parts, per, tpc, w.partials, make_finish(w.coef));
    *coef_out = w.coef;
  };
  const int vec = !p.reduce_columns ? p.reduce_vec
                  : by_spans        ? kMaxVec<T>
                                    : std::min(p.reduce_vec, p.channels_last ? Source<T, 1>::kLastMaxVec
                                                                             : Source<T, 1>::kLongRowMaxVec);
  if (vec == kMaxVec<T>)
    run(IntConst<kMaxVec<T>>{});
  else if (vec == kMaxVec<T> / 2)
    run(IntConst<kMaxVec<T> / 2>{});
  else
    run(IntConst<1>{});
  return status;
}

// Grid of the channels-last pass 2 (the *_rows kernels): column tiles of up
// to 32 vectors, and enough row blocks to fill the device once.
struct RowsGrid {
  dim3 grid;
  int tile;
};
// XVK_BATCH_NORM_SPREAD=0 runs pass 2 as one wave whatever the tuning table
// says, so the benchmark can time both grids.
int rows_spread_override() {
  static const int value = env_switch("XVK_BATCH_NORM_SPREAD");
  return value;
}

// Rows per tensor that training pass 2 stages while it waits for finalize
// (Staging), `tensors` 16-byte packs per thread and row: the tuning table's
// shared memory per block (pass2_stage_kib), or XVK_BATCH_NORM_STAGE=0 (never)
// or =1 (the table's size, or kDefaultStageKib where it has none), so the
// benchmark and the tests can run both. 16-byte vectors, where copies run in
// the background (kAsyncCopy and the device's async_copies); 0: none.
constexpr int kDefaultStageKib = 32;
// The dynamic shared memory of `stage` rows of `tensors` staged tensors.
size_t staged_bytes(int stage, int tensors) { return size_t(stage) * kThreads * tensors * 16; }
template <class T, int VEC>
int staged_rows(Context &ctx, const Plan &p, bool backward, int tensors) {
  if (!kAsyncCopy || VEC * sizeof(T) != 16 || !ctx.info->async_copies) return 0;
  static const int override = env_switch("XVK_BATCH_NORM_STAGE");
  int kib = batch_norm_stage_kib(ctx.info->table->batch_norm, backward, p.channels_last, int(sizeof(T)));
  if (override == 0) kib = 0;
  if (override == 1 && kib == 0) kib = kDefaultStageKib;
  return int(size_t(kib) * 1024 / staged_bytes(1, tensors));
}

template <class Kernel>
RowsGrid rows_grid(Context &ctx, Kernel kernel, const Plan &p, int vec, int element_bytes, size_t smem = 0) {
  const Shape &sh = p.sh;
  if (smem > 0) (void)ctx.blocks_per_sm(kernel, kThreads, smem);  // allows the kernel more than 48 KiB if asked
  const int64_t col_vectors = sh.row_len / vec;
  // Up to the whole block across a row, so a block reads one contiguous run
  // of up to 4 KB per row (channels-first rows are long: 32 lanes, 8 rows of
  // 512 bytes, ran NCHW 16-bit inference at 1.25x the copy time on the H200,
  // 256 lanes at 1.20x); wider than the row's vectors only when there are
  // fewer rows than the block would walk at once.
  int tile = std::min(kThreads, next_pow2(col_vectors));
  while (kThreads / tile > sh.rows && tile < kThreads) tile *= 2;
  const int64_t tiles = (col_vectors + tile - 1) / tile, rows_step = kThreads / tile;
  // Large tensors (the table says which): as many blocks as give each thread
  // the table's rows per thread. Otherwise, with fewer tiles than a wave:
  // one wave of blocks, each walking its share of the rows. More: a single
  // row block would leave a last, partial wave (784 tiles on 528 slots took
  // 1.5 waves' time: NCHW fp32 7 x 7 on the H100), so split the rows until
  // there are about 8 waves.
  const int per_thread = rows_spread_override() == 0 ? 0
                         : batch_norm_rows_per_thread(ctx.info->table->batch_norm, p.channels_last, element_bytes,
                                                      sh.numel * element_bytes);
  int64_t wanted;
  if (per_thread > 0) {
    wanted = (sh.rows + rows_step * per_thread - 1) / (rows_step * per_thread);
  } else {
    const int resident = ctx.blocks_per_sm(kernel, kThreads, smem);
    const int64_t wave = int64_t(ctx.info->sm_count) * resident;
    wanted = tiles <= wave ? one_wave(ctx, resident, tiles) : (8 * wave + tiles - 1) / tiles;
  }
  const int64_t row_blocks = std::max<int64_t>(
      1, std::min<int64_t>({(sh.rows + rows_step - 1) / rows_step, wanted, 65535}));
  return {dim3(unsigned(tiles), unsigned(row_blocks)), tile};
}

// The rows a pass-2 grid stages: the last `stage` of every thread's (a
// thread steps kThreads / tile rows times the grid's row blocks).
Staging staging(const Plan &p, const RowsGrid &g, int stage) {
  const int64_t step = int64_t(g.grid.y) * (kThreads / g.tile);
  return {stage > 0 ? std::max<int64_t>(0, p.sh.rows - stage * step) : p.sh.rows, stage};
}

template <class Kernel>
unsigned apply_grid(Context &ctx, Kernel kernel, int64_t vectors) {
  const int resident = ctx.blocks_per_sm(kernel, kThreads, 0);
  return unsigned(grid_blocks(ctx, (vectors + kThreads - 1) / kThreads, resident));
}

// pick(IntConst<LAST>{}) with LAST = 1 where the rows kernels of pass 2
// read with last-use loads: the tuning table's last_use_max_bytes, or
// XVK_BATCH_NORM_LAST_USE=0 or =1, so the benchmark and the tests can run
// both. Never on HIP, which has no such load (kHasLastUseLoads).
template <class T, class Pick>
auto with_last_use(Context &ctx, const Plan &p, Pick pick) {
  if constexpr (kHasLastUseLoads) {
    static const int override = env_switch("XVK_BATCH_NORM_LAST_USE");
    const bool last = override >= 0 ? override == 1
                                     : batch_norm_last_use_loads(ctx.info->table->batch_norm, p.channels_last,
                                                                 int(sizeof(T)), p.sh.numel * int64_t(sizeof(T)));
    if (last) return pick(IntConst<1>{});
  }
  return pick(IntConst<0>{});
}

// XVK_BATCH_NORM_SINGLE_PASS=0 or =1 overrides the tuning table's choice
// (the kernel must still fit), so the benchmark can time both variants.
int single_pass_override() {
  static const int value = env_switch("XVK_BATCH_NORM_SINGLE_PASS");
  return value;
}

// XVK_BATCH_NORM_HELD_KIB=K: channels-last, the single pass takes
// forward_single_pass_held with a tile of at most K KiB a block (0: it
// holds nothing and reads x twice), so the tests reach its re-read rows on
// small tensors. Unset: -1.
int held_tile_kib() {
  static const int value = [] {
    const char *v = std::getenv("XVK_BATCH_NORM_HELD_KIB");
    return v && *v ? std::atoi(v) : -1;
  }();
  return value;
}

// The training forward as one cooperative kernel, when the table asks for it
// and it can run: 16-byte aligned; channels-first with planes of whole mask
// words, or channels-last with rows of a power-of-two number of vectors up
// to the narrowest warp (forward_single_pass_last); one block per SM whose
// largest run of planes or rows fits in its shared memory. Channels-last
// rows of up to a block's vectors that the tile kernel does not take run
// forward_single_pass_held where the table (or the override) says. Returns
// false (and launches nothing) otherwise.
template <class T>
bool single_pass(Context &ctx, const xvk_batch_norm_forward_args &a, const Plan &p, const StatsFinish<T> &stats,
                 xvk_status_t &status) {
  const int override = single_pass_override();
  const BatchNormTuning *table = ctx.info->table->batch_norm;
  const int64_t bytes = p.sh.numel * int64_t(sizeof(T));
  const bool tile_wanted = batch_norm_single_pass_wanted(table, p.channels_last, int(sizeof(T)), bytes, p.sh.c);
  // The held kernel reads z after the grid's merge too: with it, two passes
  // stayed faster where the table asks for the held kernel (sm90_batch_norm.cpp).
  const bool held_wanted = p.channels_last && !a.z && batch_norm_held_pass_wanted(table, int(sizeof(T)), bytes);
  if (override == 0 || (override != 1 && !tile_wanted && !held_wanted)) return false;
  if (p.apply_vec == 1 || !ctx.info->cooperative_launch) return false;
  constexpr int VEC = kMaxVec<T>;
  const Shape &sh = p.sh;
  const int blocks = ctx.info->sm_count;
  int64_t smem = 0, states = 0;  // dynamic shared memory; partial Welford states in the workspace
  int row_align = 1, held_capacity = 0;
  void *kernel = nullptr;
  if (!p.channels_last) {
    if (sh.s % kWordBits != 0) return false;
    const int64_t planes = sh.n * sh.c;
    const int64_t max_own = (planes + blocks - 1) / blocks;  // planes per block, at most
    smem = max_own * (int64_t(sizeof(Coef)) + sh.s * int64_t(sizeof(T)));
    states = planes;
    kernel = reinterpret_cast<void *>(forward_single_pass<T, VEC>);
  } else {
    const int64_t packs = sh.c / VEC;
    if (sh.c % VEC != 0 || packs > kSinglePassThreads || (packs & (packs - 1)) != 0) return false;
    row_align = kWordBits / int(std::gcd(sh.c, int64_t(kWordBits)));  // rows of whole mask words
    const int64_t units = (sh.rows + row_align - 1) / row_align;
    const int64_t max_rows = (units + blocks - 1) / blocks * row_align;
    smem = sh.c * int64_t(sizeof(Coef)) + max_rows * sh.c * int64_t(sizeof(T)) +
           kSinglePassMaxWarps * (2 * (sh.c + 1) + packs) * int64_t(sizeof(float));
    states = int64_t(blocks) * sh.c;
    kernel = reinterpret_cast<void *>(forward_single_pass_last<T, VEC>);
    const int held_kib = held_tile_kib();
    const bool tile = packs <= kMinWarpSize && smem + kSharedReserve <= ctx.info->max_smem_per_block &&
                      held_kib < 0 && (override == 1 || tile_wanted);
    if (!tile) {
      if (override != 1 && !held_wanted) return false;
      // forward_single_pass_held: as many whole blocks of vectors as fit
      // beside the tree (half the row lanes' states, then the coefficients).
      const int64_t lanes = kSinglePassThreads / packs, block_bytes = kSinglePassThreads * int64_t(sizeof(Pack<T, VEC>));
      const int64_t tree = std::max(lanes / 2 * packs * (2 * VEC + 1), 3 * (sh.c + packs)) * int64_t(sizeof(float));
      int64_t room = ctx.info->max_smem_per_block - kSharedReserve - tree;
      if (held_kib >= 0) room = std::min(room, int64_t(held_kib) * 1024);
      held_capacity = int(std::max<int64_t>(0, room / block_bytes) * kSinglePassThreads);
      smem = held_capacity * int64_t(sizeof(Pack<T, VEC>)) + tree;
      kernel = reinterpret_cast<void *>(forward_single_pass_held<T, VEC>);
    }
  }
  // kSharedReserve covers the kernels' own shared variables; 1024 threads
  // of at most 64 registers (their launch bound) always fit an SM, so with
  // the shared memory checked one block per SM is resident. The context
  // allows the kernel its shared memory once, not per call.
  if (smem + kSharedReserve > ctx.info->max_smem_per_block) return false;
  (void)ctx.blocks_per_sm(kernel, kSinglePassThreads, size_t(smem));
  // Workspace: the channels-last kernel's c coefficients (16-byte aligned),
  // then the partial states (so 16-byte aligned too, as the channels-last
  // kernels' publish_channel_state stores need). Counters: two grid
  // barriers' pairs.
  const int64_t coef_count = p.channels_last ? sh.c : 0;
  void *base = nullptr;
  const int state_floats = p.channels_last ? kChannelStateFloats : Welford::K;
  error_t e = ctx.workspace(size_t(coef_count) * sizeof(Coef) + size_t(states) * state_floats * sizeof(float), &base);
  unsigned *counter = nullptr;
  if (e == kSuccess) e = ctx.completion_counters(4, &counter);
  if (e != kSuccess) {
    status = device_error("allocating the workspace", e);
    return true;
  }
  Shape shape = sh;
  const T *x = static_cast<const T *>(a.x), *z = static_cast<const T *>(a.z);
  T *y = static_cast<T *>(a.y);
  uint32_t *mask = a.mask;
  int relu_flag = a.relu;
  StatsFinish<T> st = stats;
  Coef *channel_coef = static_cast<Coef *>(base);
  float *partial_states = reinterpret_cast<float *>(channel_coef + coef_count);
  // The channels-first kernel's parameters are the first nine, the
  // channels-last tile kernel's the first eleven (a launch reads as many as
  // the kernel has).
  void *args[] = {&shape, &x,       &z,         &y,           &mask,        &relu_flag,
                  &st,    &partial_states, &counter, &row_align, &channel_coef, &held_capacity};
  e = launch_cooperative(kernel, unsigned(blocks), kSinglePassThreads, args, size_t(smem), ctx.stream);
  status = e == kSuccess ? XVK_SUCCESS : device_error("batch_norm single-pass forward", e);
  return true;
}

// XVK_BATCH_NORM_GROUPS overrides where the channels-first training forward
// runs as channel groups (the kernel must still fit), so the benchmark and
// the tests can run each form: =0 never, =1 forward_channel_groups, =2
// forward_channel_groups_streamed (16-bit without z; the others
// forward_channel_groups). XVK_BATCH_NORM_SINGLE_PASS=1 forces
// forward_channel_groups too where the cooperative single pass does not
// take the shape, and =0 runs neither.
int channel_groups_override() {
  static const int value = [] {
    const char *e = std::getenv("XVK_BATCH_NORM_GROUPS");
    return e && e[0] == '2' ? 2 : env_switch("XVK_BATCH_NORM_GROUPS");
  }();
  return value;
}

// forward_channel_groups_streamed where it can run (16-bit, no z, a run of
// at most a block's vectors, the tile in shared memory) and the table or the
// override wants it: a tile of at least groups_streamed_min_tile_kib, runs
// of at most groups_streamed_max_run_vectors and at least as many groups as
// SMs (fewer would leave SMs idle). Returns false (and launches nothing)
// otherwise.
template <class T>
bool streamed_channel_groups(Context &ctx, const xvk_batch_norm_forward_args &a, const Shape &sh, int group,
                             int64_t run_vectors, const StatsFinish<T> &stats, bool forced, xvk_status_t &status) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    if (a.z || run_vectors > kStreamThreads) return false;
    const GroupLayout layout{group, int(run_vectors), int(kStreamThreads / run_vectors), 0, kStreamThreads, 2};
    const size_t smem = layout.bytes(sh.n, false);
    const int64_t groups = sh.c / group, tile_bytes = sh.n * run_vectors * kVectorBytes;
    if (smem + kSharedReserve > size_t(ctx.info->max_smem_per_block)) return false;
    if (!forced) {
      const BatchNormTuning *table = ctx.info->table->batch_norm;
      const int min_kib = batch_norm_groups_streamed_min_tile_kib(table);
      if (min_kib == 0 || tile_bytes < int64_t(min_kib) * 1024 || groups < ctx.info->sm_count ||
          run_vectors > batch_norm_groups_streamed_max_run_vectors(table))
        return false;
    }
    constexpr int VEC = kMaxVec<T>;
    auto kernel = forward_channel_groups_streamed<T, VEC>;
    const int resident = ctx.blocks_per_sm(kernel, kStreamThreads, smem);  // also allows the kernel its shared memory
    const int64_t blocks = std::min<int64_t>(groups, int64_t(resident) * ctx.info->sm_count);
    status = launch_kernel(ctx, "batch_norm forward (channel groups, streamed)", kernel, dim3(unsigned(blocks)),
                           dim3(kStreamThreads), smem, sh, static_cast<const T *>(a.x), static_cast<T *>(a.y), a.mask,
                           a.relu, stats, layout);
    return true;
  }
}

// The channels-first training forward as channel groups, where it fits and
// the tuning table wants it: 16-byte aligned tensors; groups of the fewest
// channels whose per-sample runs are whole 16-byte vectors (8 of 7 x 7 in
// 16-bit, 4 in float32; 2 and 1 of 14 x 14), c a multiple of it; one group's
// planes of every sample in a block's shared memory. Tiles of at most
// groups_max_tile_kib in one wave: forward_channel_groups; larger ones,
// 16-bit: streamed_channel_groups (sm90_batch_norm.cpp has the
// measurements). Returns false (and launches nothing) otherwise.
template <class T>
bool channel_groups(Context &ctx, const xvk_batch_norm_forward_args &a, const Plan &p, const StatsFinish<T> &stats,
                    xvk_status_t &status) {
  if (p.channels_last || p.apply_vec == 1) return false;
  const int override = channel_groups_override(), single = single_pass_override();
  if (override == 0 || (override < 0 && single == 0)) return false;
  constexpr int VEC = kMaxVec<T>;
  const Shape &sh = p.sh;
  const int64_t plane_bytes = sh.s * int64_t(sizeof(T));
  const int group = int(kVectorBytes / std::gcd(plane_bytes, int64_t(kVectorBytes)));
  const int64_t run_vectors = group * plane_bytes / kVectorBytes;
  if (sh.c % group != 0 || sh.s < VEC) return false;
  const bool tuned = override < 0 && single != 1;
  if ((tuned || override == 2) && streamed_channel_groups<T>(ctx, a, sh, group, run_vectors, stats, !tuned, status))
    return true;
  if (run_vectors > kGroupThreads) return false;
  const GroupLayout layout{group, int(run_vectors), int(kGroupThreads / run_vectors), GroupLayout::words_of(group * sh.s)};
  const size_t smem = layout.bytes(sh.n, a.mask != nullptr);
  if (smem + kSharedReserve > size_t(ctx.info->max_smem_per_block)) return false;
  auto kernel = forward_channel_groups<T, VEC>;
  const int resident = ctx.blocks_per_sm(kernel, kGroupThreads, smem);  // also allows the kernel its shared memory
  if (tuned) {
    const int64_t tile_bytes = sh.n * run_vectors * kVectorBytes, groups = sh.c / group;
    const int max_kib = batch_norm_groups_max_tile_kib(ctx.info->table->batch_norm, int(sizeof(T)));
    if (tile_bytes > int64_t(max_kib) * 1024 || groups > int64_t(resident) * ctx.info->sm_count) return false;
  }
  status = launch_kernel(ctx, "batch_norm forward (channel groups)", kernel, dim3(unsigned(sh.c / group)),
                         dim3(kGroupThreads), smem, sh, static_cast<const T *>(a.x), static_cast<const T *>(a.z),
                         static_cast<T *>(a.y), a.mask, a.relu, stats, layout);
  return true;
}

template <class T>
xvk_status_t forward_typed(Context &ctx, const xvk_batch_norm_forward_args &a) {
  const Plan p = make_plan<T>(a.n, a.c, a.s, a.channels_last, {a.x, a.z, a.y});
  Coef *coef = nullptr;  // stays null in inference (CoefTable)
  xvk_status_t status = XVK_SUCCESS;
  if (a.training) {
    const int64_t shift_stride = a.channels_last ? 1 : a.s;
    const StatsFinish<T> base{static_cast<const T *>(a.x), shift_stride, a.epsilon,     a.momentum,
                              double(a.n) * double(a.s),  a.gamma,      a.beta,        a.running_mean,
                              a.running_var,              a.saved_mean, a.saved_rstd,  nullptr};
    if (single_pass<T>(ctx, a, p, base, status)) return status;
    if (channel_groups<T>(ctx, a, p, base, status)) return status;
    // Channels-first statistics over planes that are not whole vectors but
    // whole half vectors (14 x 14 in 16-bit) read half vectors: the ragged
    // kernel's per-element selects cost more than the narrower loads (H200,
    // 256x1024x14x14 fp16 bn+relu forward 157 -> 117 us). The gradient sums
    // are not changed: 184 -> 192 us that way.
    Plan stats_plan = p;
    constexpr int vec = kMaxVec<T>;
    if (!p.reduce_columns && p.reduce_vec == vec && a.s % vec != 0 && a.s % (vec / 2) == 0)
      stats_plan.reduce_vec = vec / 2;
    status = reduce<T, StatsSource>(
        ctx, stats_plan,
        [&](auto &src) {
          src.x = static_cast<const T *>(a.x);
          src.shift_stride = shift_stride;
        },
        [&](Coef *c) {
          StatsFinish<T> f = base;
          f.coef = c;
          return f;
        },
        &coef);
  }
  if (status != XVK_SUCCESS) return status;
  const CoefTable table{coef, a.running_mean, a.running_var, a.gamma, a.beta, a.epsilon};
  const bool pairs = kInferencePairs<T> && !coef && !a.z && !a.mask;
  // Vectors of half the width: the channels-last pairs alone (kInferencePairs),
  // which forward_typed sends here only with rows of whole such vectors.
  auto apply = [&](auto vec_tag) {
    constexpr int VEC = decltype(vec_tag)::value;
    constexpr bool kHalfWidth = VEC > 1 && VEC < kMaxVec<T>;
    if constexpr (VEC > 1) {
      if (p.sh.row_len % VEC == 0 && (!a.mask || p.sh.row_len % kWordBits == 0)) {
        const int tensors = a.z ? 2 : 1, stage = coef ? staged_rows<T, VEC>(ctx, p, false, tensors) : 0;
        auto kernel = with_last_use<T>(ctx, p, [&](auto last) {
          constexpr bool L = decltype(last)::value == 1;
          if constexpr (kHalfWidth) {
            return forward_apply_rows<T, VEC, VEC, L, true>;  // channels-last: VEC sets
          } else {
            return rows_kernel_for<VEC>(p, [&](auto sets) {
              constexpr int S = decltype(sets)::value;
              if constexpr (kAsyncCopy)
                if (stage > 0) return forward_apply_rows<T, VEC, S, L, false, true>;
              return pairs ? forward_apply_rows<T, VEC, S, L, kInferencePairs<T>> : forward_apply_rows<T, VEC, S, L>;
            });
          }
        });
        const size_t smem = staged_bytes(stage, tensors);
        const RowsGrid g = rows_grid(ctx, kernel, p, VEC, int(sizeof(T)), smem);
        const Staging st = staging(p, g, stage);
        return launch_kernel(ctx, "batch_norm forward (rows)", kernel, g.grid, dim3(kThreads), smem, p.sh,
                             static_cast<const T *>(a.x), static_cast<const T *>(a.z), static_cast<T *>(a.y),
                             a.mask, table, a.relu, g.tile, st);
      }
    }
    if constexpr (kHalfWidth) {
      return XVK_ERROR_INTERNAL;  // unreachable: forward_typed checked the rows
    } else {
      auto kernel = vectors_in_one_channel(p, VEC) ? forward_apply<T, VEC, true> : forward_apply<T, VEC, false>;
      return launch_kernel(ctx, "batch_norm forward", kernel,
                           dim3(apply_grid(ctx, kernel, (p.sh.numel + VEC - 1) / VEC)), dim3(kThreads), 0, p.sh,
                           static_cast<const T *>(a.x), static_cast<const T *>(a.z), static_cast<T *>(a.y),
                           a.mask, table, a.relu);
    }
  };
  if constexpr (kInferencePairs<T>)
    if (pairs && p.channels_last && p.apply_vec > 1 && p.sh.row_len % (kMaxVec<T> / 2) == 0)
      return apply(IntConst<kMaxVec<T> / 2>{});
  return p.apply_vec > 1 ? apply(IntConst<kMaxVec<T>>{}) : apply(IntConst<1>{});
}

template <class T>
xvk_status_t backward_typed(Context &ctx, const xvk_batch_norm_backward_args &a) {
  const Plan p = make_plan<T>(a.n, a.c, a.s, a.channels_last, {a.dy, a.x, a.y, a.dx, a.dz});
  Coef *coef = nullptr;
  const GradFinish base{float(double(a.n) * double(a.s)), a.gamma, a.saved_mean, a.saved_rstd, a.dgamma, a.dbeta,
                        nullptr};
  xvk_status_t status = reduce<T, GradSource>(
      ctx, p,
      [&](auto &src) {
        src.dy = static_cast<const T *>(a.dy);
        src.x = static_cast<const T *>(a.x);
        src.y = static_cast<const T *>(a.y);
        src.mask = a.mask;
        src.mean = a.saved_mean;
        src.numel = p.sh.numel;
        src.relu = a.relu;
      },
      [&](Coef *c) {
        GradFinish f = base;
        f.coef = c;
        return f;
      },
      &coef);
  if (status != XVK_SUCCESS) return status;
  auto apply = [&](auto vec_tag) {
    constexpr int VEC = decltype(vec_tag)::value;
    if constexpr (VEC > 1) {
      if (p.sh.row_len % VEC == 0) {
        const int stage = staged_rows<T, VEC>(ctx, p, true, 2);
        auto kernel = with_last_use<T>(ctx, p, [&](auto last) {
          return rows_kernel_for<VEC>(p, [&](auto sets) {
            constexpr int S = decltype(sets)::value;
            constexpr bool L = decltype(last)::value == 1;
            if constexpr (kAsyncCopy)
              if (stage > 0) return backward_apply_rows<T, VEC, S, L, true>;
            return backward_apply_rows<T, VEC, S, L>;
          });
        });
        const size_t smem = staged_bytes(stage, 2);
        const RowsGrid g = rows_grid(ctx, kernel, p, VEC, int(sizeof(T)), smem);
        const Staging st = staging(p, g, stage);
        return launch_kernel(ctx, "batch_norm backward (rows)", kernel, g.grid, dim3(kThreads), smem, p.sh,
                             static_cast<const T *>(a.dy), static_cast<const T *>(a.x),
                             static_cast<const T *>(a.y), a.mask, static_cast<T *>(a.dx),
                             static_cast<T *>(a.dz), static_cast<const Coef *>(coef), a.relu, g.tile, st);
      }
    }
    auto kernel = vectors_in_one_channel(p, VEC) ? backward_apply<T, VEC, true> : backward_apply<T, VEC, false>;
    return launch_kernel(ctx, "batch_norm backward", kernel,
                         dim3(apply_grid(ctx, kernel, (p.sh.numel + VEC - 1) / VEC)), dim3(kThreads), 0, p.sh,
                         static_cast<const T *>(a.dy), static_cast<const T *>(a.x),
                         static_cast<const T *>(a.y), a.mask, static_cast<T *>(a.dx), static_cast<T *>(a.dz),
                         static_cast<const Coef *>(coef), a.relu);
  };
  return p.apply_vec > 1 ? apply(IntConst<kMaxVec<T>>{}) : apply(IntConst<1>{});
}

// Channel indices are 32-bit in the kernels (and grid.x counts channels).
xvk_status_t check_channels(int64_t c) {
  if (c < INT32_MAX) return XVK_SUCCESS;
  char message[128];
  std::snprintf(message, sizeof message, "%lld channels; the GPU kernels take fewer than 2^31", (long long)c);
  report_error(message);
  return XVK_ERROR_UNSUPPORTED;
}

}  // namespace

xvk_status_t batch_norm_forward(Context &ctx, const xvk_batch_norm_forward_args &a, const Config *) {
  if (xvk_status_t s = check_channels(a.c); s != XVK_SUCCESS) return s;
  xvk_status_t status = XVK_ERROR_INTERNAL;
  with_dtype(a.dtype, [&](auto tag) { status = forward_typed<decltype(tag)>(ctx, a); });
  return status;
}

xvk_status_t batch_norm_backward(Context &ctx, const xvk_batch_norm_backward_args &a, const Config *) {
  if (xvk_status_t s = check_channels(a.c); s != XVK_SUCCESS) return s;
  xvk_status_t status = XVK_ERROR_INTERNAL;
  with_dtype(a.dtype, [&](auto tag) { status = backward_typed<decltype(tag)>(ctx, a); });
  return status;
}

}  // namespace xvk::gpu
