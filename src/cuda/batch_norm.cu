// BatchNorm on the GPU: training forward (per-channel Welford statistics),
// inference forward, backward, fused (add +) ReLU and the library's ReLU
// bitmask (xvk.h: bit i of the mask is element i in memory order, packed in
// 32-bit words whatever the warp width).
//
// Each call is two kernels over the activation (the minimal algorithm when
// the tensor does not fit on chip):
//   1. a per-channel reduction (Welford of x; or sums of g and g * (x - mean)
//      for the backward) whose blocks write partial results; the block that
//      finishes last merges them in a fixed order (deterministic, no float
//      atomics) and writes the per-channel outputs and coefficients;
//   2. an elementwise pass over the flat tensor that applies them
//      (y = (x - mean) * scale + beta (+ z), ReLU, mask; or dx, dz).
// The reduction has one shape per memory order: channels-first runs lanes
// along each (n, c) plane, channels-last runs lanes across channels (columns)
// and threads down the rows. Inference only runs pass 2.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cuda/launch.cuh"

namespace xvk::gpu {
namespace {

constexpr int kThreads = 256;       // every BatchNorm kernel
constexpr int kWordBits = 32;       // mask word: library format, not the warp width

// ---------------------------------------------------------------------------
// Index arithmetic: the channel of a flat element index.
// ---------------------------------------------------------------------------

// Quotient by a fixed divisor d < 2^31 for numerators < 2^32, by a multiply
// (q = (umulhi(n, magic) + n) >> shift) instead of a hardware-less 32-bit
// divide; the elementwise pass needs one per vector.
struct FastDivider {
  uint32_t magic = 0, shift = 0;
  FastDivider() = default;
  explicit FastDivider(uint32_t d) {
    while ((uint64_t(1) << shift) < d) ++shift;
    magic = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return uint32_t((uint64_t(__umulhi(n, magic)) + n) >> shift);
  }
};

// The tensor as the kernels see it. Flat element e belongs to channel
// (e / inner) % c, with inner = s for channels-first and 1 for channels-last;
// e % inner is its place in the run of one channel.
struct Shape {
  int64_t n, c, s, numel, inner;
  bool small;  // numel < 2^31: 32-bit fast division
  FastDivider div_inner, div_c;
};

Shape make_shape(int64_t n, int64_t c, int64_t s, bool channels_last) {
  Shape sh;
  sh.n = n;
  sh.c = c;
  sh.s = s;
  sh.numel = n * c * s;
  sh.inner = channels_last ? 1 : s;
  sh.small = sh.numel < (int64_t(1) << 31);
  if (sh.small) {
    sh.div_inner = FastDivider(uint32_t(sh.inner));
    sh.div_c = FastDivider(uint32_t(c));
  }
  return sh;
}

__device__ __forceinline__ void channel_at(const Shape &sh, int64_t e, int &ch, int64_t &r) {
  if (sh.small) {
    const uint32_t q = sh.div_inner.div(uint32_t(e));
    r = e - int64_t(q) * sh.inner;
    ch = int(q - sh.div_c.div(q) * uint32_t(sh.c));
  } else {
    const int64_t q = e / sh.inner;
    r = e - q * sh.inner;
    ch = int(q % sh.c);
  }
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
};

// y = relu?((x - mean) * scale + beta (+ z)), and the mask bits of y > 0.
// Lane groups of 32 / VEC lanes own one mask word; the loop runs per warp so
// every lane of a group is present for the OR of their bits.
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads) forward_apply(Shape sh, const T *x, const T *z, T *y, uint32_t *mask,
                                                          const Coef *coef, int do_relu) {
  constexpr int kLanesPerWord = kWordBits / VEC;
  static_assert(kLanesPerWord <= kMinWarpSize, "a mask word's lanes are in one warp");
  const int64_t vectors = (sh.numel + VEC - 1) / VEC;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x - lane_id(); v0 < vectors; v0 += stride) {
    const int64_t v = v0 + lane_id();
    const int64_t e = v * VEC;
    uint32_t bits = 0;
    if (v < vectors) {
      float xs[VEC], out[VEC];
      load_tail<T, VEC>(x, e, sh.numel, xs);
      if (z) load_tail<T, VEC>(z, e, sh.numel, out);
      int ch;
      int64_t r;
      channel_at(sh, e, ch, r);
      Coef k = coef[ch];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (j > 0 && step_channel(sh, ch, r)) k = coef[ch];
        float val = (xs[j] - k.center) * k.a + k.b;
        if (z) val += out[j];
        if (do_relu) val = relu(val);
        const T stored = from_float<T>(val);
        out[j] = to_float(stored);
        if (out[j] > 0.0f && e + j < sh.numel) bits |= 1u << j;  // a tail vector's padding stays 0
      }
      store_tail<T, VEC>(y, e, sh.numel, out);
    }
    if (mask) {
      bits <<= (lane_id() % kLanesPerWord) * VEC;
#pragma unroll
      for (int o = kLanesPerWord / 2; o > 0; o /= 2) bits |= shfl_xor_u32(bits, o, kLanesPerWord);
      if (lane_id() % kLanesPerWord == 0 && v < vectors) mask[e / kWordBits] = bits;
    }
  }
}

// The ReLU gradient's gate for VEC elements at e: mask bits, or y > 0.
template <class T, int VEC>
__device__ __forceinline__ uint32_t gate_bits(const T *y, const uint32_t *mask, int64_t e, int64_t numel) {
  if (mask) return load_global(mask + e / kWordBits) >> (e % kWordBits);  // VEC divides 32 and e
  float ys[VEC];
  load_tail<T, VEC>(y, e, numel, ys);
  uint32_t bits = 0;
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (ys[j] > 0.0f) bits |= 1u << j;
  return bits;
}

// dx = a * g + b * (x - mean) + c, dz = g, with g = dy gated by ReLU.
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads) backward_apply(Shape sh, const T *dy, const T *x, const T *y,
                                                           const uint32_t *mask, T *dx, T *dz, const Coef *coef,
                                                           int do_relu) {
  const int64_t vectors = (sh.numel + VEC - 1) / VEC;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
    const int64_t e = v * VEC;
    float g[VEC], xs[VEC], out[VEC];
    load_tail<T, VEC>(dy, e, sh.numel, g);
    load_tail<T, VEC>(x, e, sh.numel, xs);
    if (do_relu) {
      const uint32_t bits = gate_bits<T, VEC>(y, mask, e, sh.numel);
#pragma unroll
      for (int j = 0; j < VEC; ++j) g[j] = (bits >> j) & 1u ? g[j] : 0.0f;
    }
    int ch;
    int64_t r;
    channel_at(sh, e, ch, r);
    Coef k = coef[ch];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (j > 0 && step_channel(sh, ch, r)) k = coef[ch];
      out[j] = k.a * g[j] + k.b * (xs[j] - k.center) + k.c;
    }
    if (dz) store_tail<T, VEC>(dz, e, sh.numel, g);
    store_tail<T, VEC>(dx, e, sh.numel, out);
  }
}

// Channels-last pass 2 when c is a multiple of the vector (and of 32 when a
// mask is written): threads keep VEC channels' coefficients in registers and
// walk down the rows, instead of loading a coefficient per element. tx lanes
// across column vectors, ty down rows; grid (column tiles, row blocks). The
// lanes of one mask word (32 channels of a row) are consecutive tx of one ty,
// and every lane runs the same row loop, so all are present for the OR.
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads) forward_apply_rows(Shape sh, const T *x, const T *z, T *y,
                                                               uint32_t *mask, const Coef *coef, int do_relu,
                                                               int tile) {
  constexpr int kLanesPerWord = kWordBits / VEC;
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col0 = (int64_t(blockIdx.x) * tile + tx) * VEC;
  const bool active = col0 < sh.c;
  Coef k[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) k[j] = active ? coef[col0 + j] : Coef{};
  const int64_t rows = sh.n * sh.s;
  for (int64_t r = int64_t(blockIdx.y) * rows_step + ty; r < rows; r += int64_t(gridDim.y) * rows_step) {
    const int64_t e = r * sh.c + col0;
    uint32_t bits = 0;
    if (active) {
      float xs[VEC], out[VEC];
      load_vec<T, VEC>(x + e, xs);
      if (z) load_vec<T, VEC>(z + e, out);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float val = (xs[j] - k[j].center) * k[j].a + k[j].b;
        if (z) val += out[j];
        if (do_relu) val = relu(val);
        out[j] = to_float(from_float<T>(val));
        if (out[j] > 0.0f) bits |= 1u << j;
      }
      store_vec<T, VEC>(y + e, out);
    }
    if (mask) {
      bits <<= (tx % kLanesPerWord) * VEC;
#pragma unroll
      for (int o = kLanesPerWord / 2; o > 0; o /= 2) bits |= shfl_xor_u32(bits, o, kLanesPerWord);
      if (tx % kLanesPerWord == 0 && active) mask[e / kWordBits] = bits;
    }
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kThreads) backward_apply_rows(Shape sh, const T *dy, const T *x, const T *y,
                                                                const uint32_t *mask, T *dx, T *dz,
                                                                const Coef *coef, int do_relu, int tile) {
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col0 = (int64_t(blockIdx.x) * tile + tx) * VEC;
  if (col0 >= sh.c) return;
  Coef k[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) k[j] = coef[col0 + j];
  const int64_t rows = sh.n * sh.s;
  for (int64_t r = int64_t(blockIdx.y) * rows_step + ty; r < rows; r += int64_t(gridDim.y) * rows_step) {
    const int64_t e = r * sh.c + col0;
    float g[VEC], xs[VEC], out[VEC];
    load_vec<T, VEC>(dy + e, g);
    load_vec<T, VEC>(x + e, xs);
    if (do_relu) {
      const uint32_t bits = gate_bits<T, VEC>(y, mask, e, sh.numel);
#pragma unroll
      for (int j = 0; j < VEC; ++j) g[j] = (bits >> j) & 1u ? g[j] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = k[j].a * g[j] + k[j].b * (xs[j] - k[j].center) + k[j].c;
    if (dz) store_vec<T, VEC>(dz + e, g);
    store_vec<T, VEC>(dx + e, out);
  }
}

// Inference: the coefficients from the running statistics.
__global__ void __launch_bounds__(kThreads) inference_coef(int64_t c, const float *running_mean,
                                                           const float *running_var, const float *gamma,
                                                           const float *beta, float epsilon, Coef *coef) {
  for (int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; ch < c; ch += int64_t(gridDim.x) * blockDim.x) {
    const float rstd = 1.0f / sqrtf(running_var[ch] + epsilon);
    coef[ch] = Coef{running_mean[ch], (gamma ? gamma[ch] : 1.0f) * rstd, beta ? beta[ch] : 0.0f, 0.0f};
  }
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
};

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
template <class T, int VEC>
struct StatsSource : Welford {
  const T *x;
  int64_t shift_stride;  // the channel's first element is x[ch * shift_stride]
  struct Item {
    float v[VEC];
  };
  __device__ float context(int64_t ch) const { return channel_shift(x, ch, shift_stride); }
  __device__ Item load(int64_t e) const {
    Item it;
    load_vec<T, VEC>(x + e, it.v);
    return it;
  }
  // The batch's own mean and m2 (two passes over registers), then one merge:
  // one division per batch instead of one per element.
  template <int U>
  __device__ void add_items(float (&a)[K], const Item (&it)[U], int valid, float shift) const {
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum += u < valid ? it[u].v[j] - shift : 0.0f;
    const float count = float(valid * VEC), mean = sum / count;
    float m2 = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = it[u].v[j] - shift - mean;
        m2 += u < valid ? d * d : 0.0f;
      }
    const float b[K] = {count, mean, m2};
    merge(a, b);
  }
  template <int U>
  __device__ void add_rows(float (&a)[VEC][K], const Item (&it)[U], int valid, const float (&shift)[VEC]) const {
    const float count = float(valid), inv = 1.0f / count;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float sum = 0.0f, m2 = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) sum += u < valid ? it[u].v[j] - shift[j] : 0.0f;
      const float mean = sum * inv;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float d = it[u].v[j] - shift[j] - mean;
        m2 += u < valid ? d * d : 0.0f;
      }
      const float b[K] = {count, mean, m2};
      merge(a[j], b);
    }
  }
};

// Backward sums {sum g, sum g * (x - mean)}.
struct Sums {
  static constexpr int K = 2;
  __device__ static void identity(float (&a)[K]) { a[0] = a[1] = 0.0f; }
  __device__ static void merge(float (&a)[K], const float (&b)[K]) {
    a[0] += b[0];
    a[1] += b[1];
  }
};

template <class T, int VEC>
struct GradSource : Sums {
  const T *dy, *x, *y;
  const uint32_t *mask;
  const float *mean;
  int64_t numel;
  int relu;
  struct Item {
    float g[VEC], x[VEC];
  };
  __device__ float context(int64_t ch) const { return mean[ch]; }
  __device__ Item load(int64_t e) const {
    Item it;
    load_vec<T, VEC>(dy + e, it.g);
    load_vec<T, VEC>(x + e, it.x);
    if (relu) {
      const uint32_t bits = gate_bits<T, VEC>(y, mask, e, numel);
#pragma unroll
      for (int j = 0; j < VEC; ++j) it.g[j] = (bits >> j) & 1u ? it.g[j] : 0.0f;
    }
    return it;
  }
  template <int U>
  __device__ void add_items(float (&a)[K], const Item (&it)[U], int valid, float m) const {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = u < valid ? it[u].g[j] : 0.0f;
        a[0] += g;
        a[1] += g * (it[u].x[j] - m);
      }
  }
  template <int U>
  __device__ void add_rows(float (&a)[VEC][K], const Item (&it)[U], int valid, const float (&m)[VEC]) const {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = u < valid ? it[u].g[j] : 0.0f;
        a[j][0] += g;
        a[j][1] += g * (it[u].x[j] - m[j]);
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
  // The channel's statistics outputs (saved and running) and its coefficients.
  __device__ Coef finish(int64_t ch, const float (&a)[Welford::K], bool write_stats) const {
    const float shift = channel_shift(x, ch, shift_stride);
    const float mean = shift + a[1];
    const float var = float(double(a[2]) / count);
    const float rstd = 1.0f / sqrtf(var + epsilon);
    if (write_stats) {
      if (saved_mean) saved_mean[ch] = mean;
      if (saved_rstd) saved_rstd[ch] = rstd;
      if (running_mean) {
        const float unbiased = float(double(a[2]) / (count - 1.0));
        running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * mean;
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * unbiased;
      }
    }
    const float scale = (gamma ? gamma[ch] : 1.0f) * rstd;
    return Coef{shift, scale, (beta ? beta[ch] : 0.0f) - a[1] * scale, 0.0f};
  }
  __device__ void operator()(int64_t ch, const float (&a)[Welford::K]) const { coef[ch] = finish(ch, a, true); }
};

struct GradFinish {
  float count;
  const float *gamma, *mean, *rstd;
  float *dgamma, *dbeta;
  Coef *coef;
  __device__ void operator()(int64_t ch, const float (&a)[Sums::K]) const {
    const float r = rstd[ch];
    const float dg = a[1] * r;  // sum g * xhat
    if (dbeta) dbeta[ch] = a[0];
    if (dgamma) dgamma[ch] = dg;
    const float k = (gamma ? gamma[ch] : 1.0f) * r;
    coef[ch] = Coef{mean[ch], k, -k * r * dg / count, -k * a[0] / count};
  }
};

// Block-wide merge of every thread's state (all of one channel) into thread 0.
template <class Op>
__device__ void block_merge(float (&a)[Op::K]) {
  __shared__ float warp_part[kMaxWarpsPerBlock][Op::K];
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
    float b[Op::K];
#pragma unroll
    for (int k = 0; k < Op::K; ++k) b[k] = shfl_xor(a[k], o, kWarpSize);
    Op::merge(a, b);
  }
  if (lane_id() == 0)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) warp_part[warp_id()][k] = a[k];
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < int(blockDim.x) / kWarpSize; ++w) {
      float b[Op::K];
#pragma unroll
      for (int k = 0; k < Op::K; ++k) b[k] = warp_part[w][k];
      Op::merge(a, b);
    }
}

// Accesses in flight per thread in the reductions.
template <int VEC>
inline constexpr int kBatch = VEC == 1 ? 8 : 4;

// Channels-first reduction: block (channel, part) walks its share of the
// channel's n * (s / VEC) vectors flat, kBatch at a time. Partial results go
// to partials[part][channel][K].
template <class Src, int VEC>
__global__ void __launch_bounds__(kThreads)
    reduce_channels_first(Shape sh, Src src, int parts, FastDivider div_plane, float *partials) {
  using Op = Src;
  constexpr int U = kBatch<VEC>;
  const int64_t ch = blockIdx.x / parts;
  const int part = int(blockIdx.x % parts);
  const int64_t plane_vectors = sh.s / VEC, total = sh.n * plane_vectors;
  const int64_t begin = total * part / parts, end = total * (part + 1) / parts;
  const float context = src.context(ch);
  float a[Op::K];
  Op::identity(a);
  for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += int64_t(U) * blockDim.x) {
    typename Src::Item it[U];
    int valid = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = i0 + int64_t(u) * blockDim.x;
      if (i < end) {
        const int64_t n = sh.small ? int64_t(div_plane.div(uint32_t(i))) : i / plane_vectors;
        it[u] = src.load((n * sh.c + ch) * sh.s + (i - n * plane_vectors) * VEC);
        valid = u + 1;
      }
    }
    src.add_items(a, it, valid, context);
  }
  block_merge<Op>(a);
  if (threadIdx.x == 0)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) partials[(int64_t(part) * sh.c + ch) * Op::K + k] = a[k];
}

// Channels-last reduction: the tensor is rows (n, s) x c columns. Block
// (column tile, part): tx lanes across VEC-wide column vectors, ty down the
// part's rows, kBatch rows at a time; states merged over ty in shared memory.
template <class Src, int VEC>
__global__ void __launch_bounds__(kThreads) reduce_channels_last(Shape sh, Src src, int tile, float *partials) {
  using Op = Src;
  constexpr int U = kBatch<VEC>;
  __shared__ float tree[kThreads][VEC][Op::K];
  const int parts = int(gridDim.y), part = int(blockIdx.y);
  const int tx = int(threadIdx.x) % tile, ty = int(threadIdx.x) / tile, rows_step = int(blockDim.x) / tile;
  const int64_t col0 = (int64_t(blockIdx.x) * tile + tx) * VEC;
  const int64_t rows = sh.n * sh.s;
  const int64_t r_begin = rows * part / parts, r_end = rows * (part + 1) / parts;
  float a[VEC][Op::K];
#pragma unroll
  for (int j = 0; j < VEC; ++j) Op::identity(a[j]);
  if (col0 < sh.c) {
    float context[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) context[j] = src.context(col0 + j);  // c % VEC == 0 when VEC > 1
    for (int64_t r0 = r_begin + ty; r0 < r_end; r0 += int64_t(U) * rows_step) {
      typename Src::Item it[U];
      int valid = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t r = r0 + int64_t(u) * rows_step;
        if (r < r_end) {
          it[u] = src.load(r * sh.c + col0);
          valid = u + 1;
        }
      }
      src.add_rows(a, it, valid, context);
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j)
#pragma unroll
    for (int k = 0; k < Op::K; ++k) tree[threadIdx.x][j][k] = a[j][k];
  __syncthreads();
  for (int h = rows_step / 2; h > 0; h /= 2) {
    if (ty < h)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float b[Op::K];
#pragma unroll
        for (int k = 0; k < Op::K; ++k) b[k] = tree[threadIdx.x + h * tile][j][k];
        Op::merge(a[j], b);
#pragma unroll
        for (int k = 0; k < Op::K; ++k) tree[threadIdx.x][j][k] = a[j][k];
      }
    __syncthreads();
  }
  if (ty == 0 && col0 < sh.c)
#pragma unroll
    for (int j = 0; j < VEC; ++j)
#pragma unroll
      for (int k = 0; k < Op::K; ++k) partials[(int64_t(part) * sh.c + col0 + j) * Op::K + k] = a[j][k];
}

// Merges each channel's partials in a fixed order (deterministic, no float
// atomics): `tpc` lanes per channel (a power of two <= 32, inside one warp)
// take every tpc-th part, then a butterfly over those lanes; lane 0 finishes.
template <class Op, class Finish>
__global__ void __launch_bounds__(kThreads)
    finalize(int64_t c, int parts, int tpc, const float *partials, Finish finish) {
  const int sub = int(threadIdx.x) % tpc;
  const int64_t ch = int64_t(blockIdx.x) * (blockDim.x / tpc) + threadIdx.x / tpc;
  float a[Op::K];
  Op::identity(a);
  if (ch < c)
    for (int part = sub; part < parts; part += tpc) {
      float b[Op::K];
#pragma unroll
      for (int k = 0; k < Op::K; ++k) b[k] = partials[(int64_t(part) * c + ch) * Op::K + k];
      Op::merge(a, b);
    }
  for (int o = tpc / 2; o > 0; o /= 2) {
    float b[Op::K];
#pragma unroll
    for (int k = 0; k < Op::K; ++k) b[k] = shfl_xor(a[k], o, tpc);
    Op::merge(a, b);
  }
  if (sub == 0 && ch < c) finish(ch, a);
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
    const volatile unsigned *arrived = counter;
    while (*arrived < blocks) {
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

// Block b owns a run of whole (n, c) planes, which it loads once into shared
// memory while taking each plane's Welford state; after the grid barrier each
// block merges, for each of its planes' channels, the states of that
// channel's N planes in order n = 0..N-1 (every block the same way, so all
// agree), normalizes its planes from shared memory and writes y and the mask
// (planes hold whole mask words: s % 32 == 0). The owner of plane (0, c)
// writes channel c's saved and running statistics.
template <class T, int VEC>
__global__ void __launch_bounds__(kSinglePassThreads)
    forward_single_pass(Shape sh, const T *x, const T *z, T *y, uint32_t *mask, int do_relu, StatsFinish<T> stats,
                        float *plane_stats, unsigned *counter) {
  constexpr int kLanesPerWord = kWordBits / VEC;
  extern __shared__ Coef tile_storage[];  // 16-byte aligned
  T *tile = reinterpret_cast<T *>(tile_storage);
  __shared__ Coef k_shared;
  const int64_t planes = sh.n * sh.c;
  const int64_t p0 = planes * blockIdx.x / gridDim.x, p1 = planes * (blockIdx.x + 1) / gridDim.x;
  const int64_t vectors = sh.s / VEC;
  // The block's planes are contiguous in x: copy them all at once (4 loads
  // in flight per thread) so DRAM latency is paid once, not once per plane.
  {
    const Pack<T, VEC> *src = reinterpret_cast<const Pack<T, VEC> *>(x + p0 * sh.s);
    Pack<T, VEC> *dst = reinterpret_cast<Pack<T, VEC> *>(tile);
    const int64_t count = (p1 - p0) * vectors;
    constexpr int U = 4;
    for (int64_t v0 = threadIdx.x; v0 < count; v0 += int64_t(U) * blockDim.x) {
      Pack<T, VEC> packs[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (v0 + int64_t(u) * blockDim.x < count) packs[u] = load_global(src + v0 + int64_t(u) * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (v0 + int64_t(u) * blockDim.x < count) dst[v0 + int64_t(u) * blockDim.x] = packs[u];
    }
    __syncthreads();
  }
  for (int64_t p = p0; p < p1; ++p) {
    float a[Welford::K];
    Welford::identity(a);
    const float shift = channel_shift(x, p % sh.c, sh.s);
    const T *t = tile + (p - p0) * sh.s;
    for (int64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
      const Pack<T, VEC> pack = reinterpret_cast<const Pack<T, VEC> *>(t)[v];
      float b[Welford::K] = {float(VEC), 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < VEC; ++j) b[1] += to_float(pack.v[j]) - shift;
      b[1] /= float(VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) b[2] += (to_float(pack.v[j]) - shift - b[1]) * (to_float(pack.v[j]) - shift - b[1]);
      Welford::merge(a, b);
    }
    block_merge<Welford>(a);
    if (threadIdx.x == 0)
#pragma unroll
      for (int k = 0; k < Welford::K; ++k) plane_stats[p * Welford::K + k] = a[k];
    __syncthreads();
  }
  grid_barrier(counter);
  const volatile float *ps = plane_stats;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / sh.c, ch = p - n * sh.c;
    if (threadIdx.x == 0) {
      float a[Welford::K];
      Welford::identity(a);
      for (int64_t m = 0; m < sh.n; ++m) {
        float b[Welford::K];
#pragma unroll
        for (int k = 0; k < Welford::K; ++k) b[k] = ps[(m * sh.c + ch) * Welford::K + k];
        Welford::merge(a, b);
      }
      k_shared = stats.finish(ch, a, n == 0);
    }
    __syncthreads();
    const Coef k = k_shared;
    const T *t = tile + (p - p0) * sh.s;
    // Warp-uniform loop: a mask word's lanes are all present for the OR.
    for (int64_t v0 = int64_t(threadIdx.x) - lane_id(); v0 < vectors; v0 += blockDim.x) {
      const int64_t v = v0 + lane_id();
      uint32_t bits = 0;
      if (v < vectors) {
        const Pack<T, VEC> pack = reinterpret_cast<const Pack<T, VEC> *>(t)[v];
        float out[VEC];
        if (z) load_vec<T, VEC>(z + p * sh.s + v * VEC, out);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          float val = (to_float(pack.v[j]) - k.center) * k.a + k.b;
          if (z) val += out[j];
          if (do_relu) val = relu(val);
          out[j] = to_float(from_float<T>(val));
          if (out[j] > 0.0f) bits |= 1u << j;
        }
        store_vec<T, VEC>(y + p * sh.s + v * VEC, out);
      }
      if (mask) {
        bits <<= (lane_id() % kLanesPerWord) * VEC;
#pragma unroll
        for (int o = kLanesPerWord / 2; o > 0; o /= 2) bits |= shfl_xor_u32(bits, o, kLanesPerWord);
        if (lane_id() % kLanesPerWord == 0 && v < vectors) mask[(p * sh.s + v * VEC) / kWordBits] = bits;
      }
    }
    __syncthreads();  // k_shared is rewritten for the next plane
  }
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
  int reduce_vec;  // elements per access in the reduction: 16 or 8 bytes' worth, or 1
  int apply_vec;   // > 1: the widest vector in the elementwise pass
};

template <class T>
Plan make_plan(int64_t n, int64_t c, int64_t s, bool channels_last, std::initializer_list<const void *> ptrs) {
  Plan p;
  p.sh = make_shape(n, c, s, channels_last);
  p.channels_last = channels_last;
  constexpr int vec = kMaxVec<T>;
  bool aligned = true;
  for (const void *q : ptrs) aligned = aligned && (!q || aligned_to(q, kVectorBytes));
  // Pass 2 is flat: only the pointers matter. Pass 1 also needs each run
  // (a plane, or a row of channels) to start on a vector boundary.
  p.apply_vec = aligned ? vec : 1;
  // 14 x 14 planes (196 elements) are not whole 16-byte vectors of fp16 but are of 8-byte ones.
  const int64_t run = channels_last ? c : s;
  p.reduce_vec = !aligned ? 1 : run % vec == 0 ? vec : run % (vec / 2) == 0 ? vec / 2 : 1;
  return p;
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
  int parts = 1;
  Workspace w{};
  auto run = [&](auto vec_tag) {
    constexpr int VEC = decltype(vec_tag)::value;
    using Src = Source<T, VEC>;
    Src src{};
    init(src);
    const int sms = ctx.info->sm_count;
    if (!p.channels_last) {
      auto kernel = reduce_channels_first<Src, VEC>;
      // One wave of blocks in all; each block at least a few batches of work.
      const int resident = ctx.blocks_per_sm(kernel, kThreads, 0);
      const int64_t target = int64_t(sms) * resident;
      const int64_t total = sh.n * (sh.s / VEC);
      parts = int(std::max<int64_t>(1, std::min<int64_t>({(target + sh.c - 1) / sh.c,
                                                          total / (int64_t(kThreads) * kBatch<VEC>), 4096})));
      status = workspace_for(ctx, sh.c, int64_t(parts) * sh.c * Src::K, w);
      if (status != XVK_SUCCESS) return;
      const FastDivider div_plane(sh.small ? uint32_t(sh.s / VEC) : 1u);
      kernel<<<unsigned(sh.c * parts), kThreads, 0, ctx.stream>>>(sh, src, parts, div_plane, w.partials);
      status = check_launch("batch_norm reduce (channels-first)");
    } else {
      const int64_t col_vectors = (sh.c + VEC - 1) / VEC;
      const int tile = std::min(32, next_pow2(col_vectors));
      const int rows_step = kThreads / tile;
      const int64_t tiles = (col_vectors + tile - 1) / tile;
      auto kernel = reduce_channels_last<Src, VEC>;
      const int resident = ctx.blocks_per_sm(kernel, kThreads, 0);
      const int64_t target = int64_t(sms) * resident;
      const int64_t rows = sh.n * sh.s;
      parts = int(std::max<int64_t>(1, std::min<int64_t>({rows / (int64_t(rows_step) * kBatch<VEC>),
                                                          (target + tiles - 1) / tiles, 65535})));
      status = workspace_for(ctx, sh.c, int64_t(parts) * sh.c * Src::K, w);
      if (status != XVK_SUCCESS) return;
      kernel<<<dim3(unsigned(tiles), unsigned(parts)), kThreads, 0, ctx.stream>>>(sh, src, tile, w.partials);
      status = check_launch("batch_norm reduce (channels-last)");
    }
    if (status != XVK_SUCCESS) return;
    const int tpc = std::min(32, next_pow2(parts));
    const int per_block = kThreads / tpc;
    auto fin = finalize<Src, decltype(make_finish(w.coef))>;
    fin<<<unsigned((sh.c + per_block - 1) / per_block), kThreads, 0, ctx.stream>>>(sh.c, parts, tpc, w.partials,
                                                                                    make_finish(w.coef));
    status = check_launch("batch_norm finalize");
    *coef_out = w.coef;
  };
  if (p.reduce_vec == kMaxVec<T>)
    run(IntConst<kMaxVec<T>>{});
  else if (p.reduce_vec == kMaxVec<T> / 2)
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
template <class Kernel>
RowsGrid rows_grid(Context &ctx, Kernel kernel, const Shape &sh, int vec) {
  const int64_t col_vectors = sh.c / vec;
  const int tile = std::min(32, next_pow2(col_vectors));
  const int64_t tiles = (col_vectors + tile - 1) / tile, rows_step = kThreads / tile;
  const int64_t target = int64_t(ctx.info->sm_count) * ctx.blocks_per_sm(kernel, kThreads, 0);
  const int64_t row_blocks = std::max<int64_t>(
      1, std::min<int64_t>({(sh.n * sh.s + rows_step - 1) / rows_step, (target + tiles - 1) / tiles, 65535}));
  return {dim3(unsigned(tiles), unsigned(row_blocks)), tile};
}

template <class Kernel>
unsigned apply_grid(Context &ctx, Kernel kernel, int64_t vectors) {
  const int resident = ctx.blocks_per_sm(kernel, kThreads, 0);
  return unsigned(grid_blocks(ctx, (vectors + kThreads - 1) / kThreads, resident));
}

// XVK_BATCH_NORM_SINGLE_PASS=0 or =1 overrides the tuning table's size limit
// (the kernel must still fit), so the benchmark can time both variants.
int single_pass_override() {
  static const int value = [] {
    const char *e = std::getenv("XVK_BATCH_NORM_SINGLE_PASS");
    return e && e[0] == '1' ? 1 : e && e[0] == '0' ? 0 : -1;
  }();
  return value;
}

// The training forward as one cooperative kernel, when the table asks for it
// and it can run: channels-first, 16-byte aligned, planes of whole mask
// words, the largest run of planes per block fits in one SM's shared memory.
// Returns false (and launches nothing) otherwise.
template <class T>
bool single_pass(Context &ctx, const xvk_batch_norm_forward_args &a, const Plan &p, const StatsFinish<T> &stats,
                 xvk_status_t &status) {
  const int override = single_pass_override();
  const BatchNormTuning *tuning = ctx.info->table->batch_norm;
  const int64_t bytes = p.sh.numel * int64_t(sizeof(T));
  if (override == 0 || (override != 1 && (!tuning || bytes > tuning->single_pass_max_bytes))) return false;
  if (p.channels_last || p.apply_vec == 1 || p.sh.s % kWordBits != 0 || !ctx.info->cooperative_launch) return false;
  constexpr int VEC = kMaxVec<T>;
  auto kernel = forward_single_pass<T, VEC>;
  const int blocks = ctx.info->sm_count;
  const int64_t planes = p.sh.n * p.sh.c;
  const int64_t smem = (planes + blocks - 1) / blocks * p.sh.s * int64_t(sizeof(T));
  constexpr int kStaticSmem = 1024;  // the kernel's own shared variables, with room to spare
  if (smem + kStaticSmem > ctx.info->max_smem_per_block) return false;
  if (set_max_dynamic_smem(kernel, int(smem)) != kSuccess) {
    (void)get_last_error();
    return false;
  }
  int resident = 0;
  if (occupancy_blocks_per_sm(&resident, kernel, kSinglePassThreads, size_t(smem)) != kSuccess || resident < 1) {
    (void)get_last_error();
    return false;
  }
  void *base = nullptr;
  error_t e = ctx.workspace(size_t(planes) * Welford::K * sizeof(float), &base);
  unsigned *counter = nullptr;
  if (e == kSuccess) e = ctx.completion_counters(&counter);
  if (e != kSuccess) {
    status = device_error("allocating the workspace", e);
    return true;
  }
  Shape sh = p.sh;
  const T *x = static_cast<const T *>(a.x), *z = static_cast<const T *>(a.z);
  T *y = static_cast<T *>(a.y);
  uint32_t *mask = a.mask;
  int relu_flag = a.relu;
  StatsFinish<T> st = stats;
  float *plane_stats = static_cast<float *>(base);
  void *args[] = {&sh, &x, &z, &y, &mask, &relu_flag, &st, &plane_stats, &counter};
  e = launch_cooperative(kernel, unsigned(blocks), kSinglePassThreads, args, size_t(smem), ctx.stream);
  status = e == kSuccess ? XVK_SUCCESS : device_error("batch_norm single-pass forward", e);
  return true;
}

template <class T>
xvk_status_t forward_typed(Context &ctx, const xvk_batch_norm_forward_args &a) {
  const Plan p = make_plan<T>(a.n, a.c, a.s, a.channels_last, {a.x, a.z, a.y});
  Coef *coef = nullptr;
  xvk_status_t status;
  if (a.training) {
    const int64_t shift_stride = a.channels_last ? 1 : a.s;
    const StatsFinish<T> base{static_cast<const T *>(a.x), shift_stride, a.epsilon,     a.momentum,
                              double(a.n) * double(a.s),  a.gamma,      a.beta,        a.running_mean,
                              a.running_var,              a.saved_mean, a.saved_rstd,  nullptr};
    if (single_pass<T>(ctx, a, p, base, status)) return status;
    status = reduce<T, StatsSource>(
        ctx, p,
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
  } else {
    Workspace w;
    status = workspace_for(ctx, a.c, 0, w);
    if (status != XVK_SUCCESS) return status;
    coef = w.coef;
    inference_coef<<<unsigned(std::min<int64_t>((a.c + kThreads - 1) / kThreads, 1024)), kThreads, 0, ctx.stream>>>(
        a.c, a.running_mean, a.running_var, a.gamma, a.beta, a.epsilon, coef);
    status = check_launch("batch_norm inference coefficients");
  }
  if (status != XVK_SUCCESS) return status;
  auto apply = [&](auto vec_tag) {
    constexpr int VEC = decltype(vec_tag)::value;
    if (VEC > 1 && p.channels_last && a.c % VEC == 0 && (!a.mask || a.c % kWordBits == 0)) {
      const RowsGrid g = rows_grid(ctx, forward_apply_rows<T, VEC>, p.sh, VEC);
      forward_apply_rows<T, VEC><<<g.grid, kThreads, 0, ctx.stream>>>(
          p.sh, static_cast<const T *>(a.x), static_cast<const T *>(a.z), static_cast<T *>(a.y), a.mask, coef, a.relu,
          g.tile);
      return check_launch("batch_norm forward (rows)");
    }
    auto kernel = forward_apply<T, VEC>;
    kernel<<<apply_grid(ctx, kernel, (p.sh.numel + VEC - 1) / VEC), kThreads, 0, ctx.stream>>>(
        p.sh, static_cast<const T *>(a.x), static_cast<const T *>(a.z), static_cast<T *>(a.y), a.mask, coef, a.relu);
    return check_launch("batch_norm forward");
  };
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
    if (VEC > 1 && p.channels_last && a.c % VEC == 0) {
      const RowsGrid g = rows_grid(ctx, backward_apply_rows<T, VEC>, p.sh, VEC);
      backward_apply_rows<T, VEC><<<g.grid, kThreads, 0, ctx.stream>>>(
          p.sh, static_cast<const T *>(a.dy), static_cast<const T *>(a.x), static_cast<const T *>(a.y), a.mask,
          static_cast<T *>(a.dx), static_cast<T *>(a.dz), coef, a.relu, g.tile);
      return check_launch("batch_norm backward (rows)");
    }
    auto kernel = backward_apply<T, VEC>;
    kernel<<<apply_grid(ctx, kernel, (p.sh.numel + VEC - 1) / VEC), kThreads, 0, ctx.stream>>>(
        p.sh, static_cast<const T *>(a.dy), static_cast<const T *>(a.x), static_cast<const T *>(a.y), a.mask,
        static_cast<T *>(a.dx), static_cast<T *>(a.dz), coef, a.relu);
    return check_launch("batch_norm backward");
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
