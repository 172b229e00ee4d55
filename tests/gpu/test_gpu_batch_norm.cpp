// BatchNorm: the GPU backend against the CPU backend, through the public API only.
//
// Every case builds the same tensors (shape, strides, byte_offset, data) on a
// GPU context and on the CPU context, runs the training forward, the
// inference forward and the backward on both, and compares every output:
// y, the ReLU mask, saved_mean/saved_rstd, running_mean/running_var, dx, dz,
// dgamma, dbeta. Outputs are poisoned before each run (NaN; masks 0xA5A5A5A5)
// so that an unwritten element fails, and every tensor has guard bytes before
// and after its elements that must stay as they were. The backward of both
// backends reads the same inputs: the CPU forward's y or mask (so the GPU also
// reads a mask written by another backend) and the CPU forward's statistics.
//
// What is covered
//   - dtypes float32, float16, bfloat16; activation NONE and RELU; with and
//     without z (Add+ReLU), gamma, beta, running statistics, saved statistics
//     (GPU side), dz, dgamma/dbeta; the mask written or not, the backward from
//     the mask (uint32 or int32 words) or from y. kCombo lists the eight
//     combinations; "every option" runs all of them on every dtype and memory
//     order, the other cases cycle through them.
//   - memory orders: channels-first (N, C, spatial) contiguous; PyTorch's
//     channels_last strides on an (N, C, spatial) shape; an (N, spatial, C)
//     shape with channel_axis -1 (or ndim - 1); the (N, C) case; 1 to 3
//     spatial dimensions.
//   - shapes: C in {1, 3, 5, 7, 64, 1000, 2049}, H*W in {1, 7*7, 13, 14*14,
//     112*112}, N in {1, 2, 3, 32}; random odd shapes; large M per channel
//     ((256, 3, 64, 64): ~1e6 values per channel); many channels channels-last
//     ((8, 4099, 3, 3)); M == 1 (inference only: training needs M > 1);
//     channels-last C = 8 .. 256, rows of 1 to 64 vectors (the channels-last
//     single-pass forward's cases and its limits).
//   - misaligned data: a byte_offset of one element breaks 16-byte alignment,
//     on every tensor of a call or on one of them (x, z, y, dy, dx, dz, the
//     mask, gamma, beta, running or saved statistics, dgamma/dbeta).
//   - large offsets: per-channel means near 1e4 with std 1e-2 in float32
//     (near 100 with std 1 in float16/bfloat16).
//   - an outlier: each channel's first element (the center of its
//     statistics) 1000 stds from the rest, 2^20 values per channel
//   - NaN: a NaN in one channel of x makes that channel's training outputs
//     NaN (y, statistics, dx, dgamma) and leaves the other channels finite.
//   - in-place: y = x and y = z in the forwards, dx = x and dz = dy in the
//     backward.
//   - determinism: the GPU runs each training forward and backward twice,
//     outputs re-poisoned in between (running statistics restored): saved and
//     running statistics, mask, y, dx, dgamma and dbeta must be bitwise equal.
//   - a float16 tensor of 2^31 + 2^16 elements (N = 32769, C = 16, 64 x 64), in
//     both memory orders: forward with ReLU and mask, backward from the mask;
//     checked on six batches (including the last, past 2^31 elements) and all
//     channels' statistics. The data repeats every 9 batches, so the reference
//     is the CPU backend on a (9, 16, 64, 64) tensor. Skipped when the device
//     cannot allocate its 16.3 GiB (xvk_memory_alloc returns
//     XVK_ERROR_OUT_OF_MEMORY), and under XVK_TEST_QUICK.
//
// Tolerances: the agreement bound of test_support.hpp,
//     |gpu - cpu| <= agree(dtype) * (|cpu| + floor),
// with agreement_floor() (5% of the output's largest |value|, 1% of the
// inputs' largest |value|) raised per channel by BatchNorm terms, each the
// magnitude of the terms that the output is computed from. One fact underlies
// them: a GPU accumulates the M values of a channel (up to ~1e6 here, 1.3e8
// in the 2^31 case) in float32, in per-thread runs and then trees whose
// lengths the test cannot know; the CPU backend accumulates in float64.
//   - dgamma, dbeta: sums over M. Their float32 rounding errors have random
//     signs and grow like the root of the sum of the squared terms, not like
//     the sum: the floor is sqrt(sum over the channel of t^2), t = g for dbeta
//     and g * xhat for dgamma. agree(float32) * that is ~335 float32
//     half-ulps of it: room for long runs, too little to lose a block of them.
//   - saved_mean, running_mean: a float32 mean accumulated in runs of L values
//     is off by ~sqrt(L) ulps of the values it adds, not of the result (which
//     can be near 0): the floor is the channel's root mean square of x.
//   - training y: that mean error reaches y times rstd * |gamma|: the floor
//     has agree(float32) * std * rstd * |gamma| (std rather than root mean
//     square: where |mean| >> std, the statistics must come from a shifted
//     accumulation anyway, see below).
//   - training and inference y: a GPU normalizes with float32 statistics (the
//     training forward writes the mean it uses as saved_mean) where the CPU
//     backend uses its float64 mean; a float32 mean is off by up to half an
//     ulp of |mean|. The floor has 2^-22 * |mean| * rstd * |gamma| (two ulps
//     of the mean; also room for kernels that fold the mean into one scale
//     and shift). It only matters where |mean| * rstd is large, the
//     large-offset case: there it is ~0.15 to 0.25 on values of ~1, about two
//     of the ~0.1 steps in which float32 values near 1e4 with std 1e-2 come.
//   - dx = gamma * rstd * (g - dbeta / M - xhat * dgamma / M): its error
//     follows rstd * |gamma| * max |g| over the channel (the norms' dx floor).
// The variance gets no extra room: saved_rstd and running_var must agree to
// agree(float32) = 2e-5 relative. In the large-offset case that requires the
// variance to be accumulated around a shift (as src/cuda/norms.cu does
// around each row's first value) or in a wider type: float32 values near 1e4
// with std 1e-2 lie only ~10 ulps of 1e4 apart, so a float32 two-pass
// variance (its mean rounded by up to half an ulp, ~5e-4) is off by up to
// ~0.24%, and an unshifted float32 Welford, whose running mean stops moving
// once (x - mean) / n drops under half an ulp, by several percent.
// Calibration: a host simulation of float32 kernels put in place of the GPU's
// outputs (per-thread Welford runs of 256, 4096 or 65536 values merged by
// Chan's rule in a tree, float32 tree sums in the backward, float32
// elementwise passes) passes every case when the statistics are accumulated
// around the channel's first value, and fails only the large-offset case
// (saved_rstd off by 3-8%, allowed ~0.004%) when they are not; two-pass and
// sum-of-squares variances fail there too, the latter also elsewhere. Faults
// planted in the outputs (an element 4 agreement bounds off in y or dx,
// 1e-4 in one rstd or running_var, 0.5 in one dgamma or dbeta, one flipped
// or trailing mask bit, an unwritten element, a changed guard byte, one ulp of
// nondeterminism) fail every case they apply to.
//
// The ReLU mask is compared bit by bit with the CPU's. First, each GPU bit
// must be exactly "GPU y > 0" (the contract: a mask of y as stored). Second,
// a GPU bit may differ from the CPU's only where the y comparison would
// accept either outcome: where the CPU's pre-activation v (recomputed in
// float64 from the inputs and the CPU's statistics) satisfies
// |v| <= agree(dtype) * (|v| + y floor). A NaN pre-activation gives 0 on both.
// The bits past the last element of the last word must be 0.
//
// Runs on the CUDA backend, or the HIP one, whichever is usable
// (XVK_TEST_GPU_BACKEND=cuda|hip picks); exits 77 (CTest: skipped) when neither
// is. XVK_TEST_GPU_BACKEND=cpu compares the CPU backend with itself, to debug
// the suite on a machine without a GPU (it proves nothing about a GPU; the
// 2^31 case then needs XVK_TEST_HUGE=1 and ~17 GiB of host memory).
// XVK_TEST_QUICK=1 keeps a subset (for compute-sanitizer) that still covers
// every option, memory order, dtype and misalignment.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "test_support.hpp"

using namespace xvk_test;

namespace {

xvk_context *g_gpu = nullptr;
xvk_context *g_cpu = nullptr;
bool g_self_check = false;
Rng g_rng(20261123);
const bool kQuick = std::getenv("XVK_TEST_QUICK") != nullptr;

#define XVK_OK(call) REQUIRE_MESSAGE((call) == XVK_SUCCESS, xvk_last_error_message())

constexpr int kGpu = 0, kCpu = 1;
xvk_context *context(int side) { return side == kGpu ? g_gpu : g_cpu; }

// ---------------------------------------------------------------------------
// Memory orders
// ---------------------------------------------------------------------------

enum class Mem {
  first,  // (N, C, spatial...) contiguous; also the (N, C) case
  last,   // (N, C, spatial...) with PyTorch's channels_last strides
  nhwc    // (N, spatial..., C) contiguous, channel_axis -1 (or ndim - 1)
};

struct Geometry {
  int64_t n = 0, c = 0, s = 1;
  Mem mem = Mem::first;
  std::vector<int64_t> shape, strides;  // strides empty: contiguous (NULL strides)
  int32_t axis = 1;                     // options->channel_axis
  int64_t numel() const { return n * c * s; }
  // The channel of the element at memory position e.
  int64_t channel(int64_t e) const { return mem == Mem::first ? (e / s) % c : e % c; }
  // The memory position of element (batch i, channel ch, spatial j).
  int64_t position(int64_t i, int64_t ch, int64_t j) const {
    return mem == Mem::first ? (i * c + ch) * s + j : (i * s + j) * c + ch;
  }
  std::string str() const {
    const char *order = mem == Mem::first ? (shape.size() == 2 ? "(N, C)" : "channels-first")
                        : mem == Mem::last ? "channels_last strides"
                                           : "(N, spatial, C)";
    return shape_string(shape) + " " + order + " channel_axis " + std::to_string(axis);
  }
};

// alt_axis: channel_axis ndim - 1 instead of -1 for (N, spatial, C), -1 instead
// of 1 for (N, C).
Geometry geometry(int64_t n, int64_t c, const std::vector<int64_t> &spatial, Mem mem, bool alt_axis = false) {
  Geometry g;
  g.n = n;
  g.c = c;
  g.s = product(spatial);
  if (spatial.empty()) mem = Mem::first;  // (N, C): one memory order
  g.mem = mem;
  if (mem == Mem::nhwc) {
    g.shape = {n};
    g.shape.insert(g.shape.end(), spatial.begin(), spatial.end());
    g.shape.push_back(c);
    g.axis = alt_axis ? int32_t(g.shape.size()) - 1 : -1;
  } else {
    g.shape = {n, c};
    g.shape.insert(g.shape.end(), spatial.begin(), spatial.end());
    g.axis = spatial.empty() && alt_axis ? -1 : 1;
  }
  if (mem == Mem::last) {
    const size_t nd = g.shape.size();
    g.strides.assign(nd, 1);
    int64_t step = c;
    for (size_t k = nd - 1; k >= 2; --k) {
      g.strides[k] = step;
      step *= g.shape[k];
    }
    g.strides[0] = step;
  }
  return g;
}

// ---------------------------------------------------------------------------
// Tensors: dense, elements in memory order, guard bytes before and after
// ---------------------------------------------------------------------------

void encode_values(DType t, const std::vector<float> &v, unsigned char *dst) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f32) {
      std::memcpy(dst + 4 * i, &v[i], 4);
    } else {
      const uint16_t bits = t == DType::f16 ? xvk::to_half(v[i]).bits : xvk::to_bfloat16(v[i]).bits;
      std::memcpy(dst + 2 * i, &bits, 2);
    }
  }
}

std::vector<float> decode_values(DType t, const unsigned char *src, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::f32) {
      std::memcpy(&out[i], src + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      out[i] = t == DType::f16 ? xvk::to_float(xvk::half_t{bits}) : xvk::to_float(xvk::bfloat16_t{bits});
    }
  }
  return out;
}

enum class Kind { values, mask_u32, mask_i32 };

// One tensor on one context. Its elements are read and written in memory
// order (position e at data + e * element size): every BatchNorm tensor is
// dense. byte_offset is 16 (aligned) or one element (misaligned); 16 bytes of
// guard follow the last element. Masks are uint32/int32 words, poisoned with
// 0xA5A5A5A5; everything else is poisoned with NaN.
class Buf {
 public:
  Buf(int side, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, DType t, bool misaligned,
      Kind kind = Kind::values)
      : ctx_(context(side)), dtype_(t), kind_(kind), elem_(dtype_size(t)) {
    tensor_ = std::make_unique<Tensor>(ctx_, shape, t, strides, misaligned ? elem_ : 16, 16);
    desc_ = tensor_->desc();
    if (kind != Kind::values)
      desc_.t().dtype = DLDataType{uint8_t(kind == Kind::mask_u32 ? kDLUInt : kDLInt), 32, 1};
    numel_ = size_t(tensor_->numel());
    begin_ = size_t(tensor_->dl()->byte_offset);
    end_ = begin_ + numel_ * elem_;
    poison();
    head_ = bytes_at(0, begin_);
    tail_ = bytes_at(end_, tensor_->bytes());
  }
  DLTensor *dl() { return desc_.get(); }
  size_t numel() const { return numel_; }

  void poison() {
    Bytes b(numel_ * elem_);
    if (kind_ != Kind::values) {
      std::memset(b.data(), 0xA5, b.size());
    } else {
      const std::vector<unsigned char> nan = nan_bytes(dtype_);
      for (size_t i = 0; i < numel_; ++i) std::memcpy(b.data() + i * elem_, nan.data(), elem_);
    }
    put(b);
  }
  void write(const std::vector<float> &v) {
    REQUIRE(v.size() == numel_);
    Bytes b(numel_ * elem_);
    encode_values(dtype_, v, b.data());
    put(b);
  }
  std::vector<float> read() const {
    const Bytes b = bytes_at(begin_, end_);
    return decode_values(dtype_, b.data(), numel_);
  }
  void write_words(const std::vector<uint32_t> &w) {
    REQUIRE(w.size() == numel_);
    Bytes b(numel_ * 4);
    std::memcpy(b.data(), w.data(), b.size());
    put(b);
  }
  std::vector<uint32_t> read_words() const {
    const Bytes b = bytes_at(begin_, end_);
    std::vector<uint32_t> w(numel_);
    std::memcpy(w.data(), b.data(), b.size());
    return w;
  }
  // The bytes before the first element and after the last are as created.
  bool guards_intact() const { return bytes_at(0, begin_) == head_ && bytes_at(end_, tensor_->bytes()) == tail_; }

 private:
  Bytes bytes_at(size_t lo, size_t hi) const {
    Bytes b(hi > lo ? hi - lo : 0);
    if (!b.empty())
      copy_to_host(ctx_, b.data(), static_cast<const unsigned char *>(tensor_->allocation()) + lo, b.size());
    return b;
  }
  void put(const Bytes &b) {
    if (!b.empty()) copy_to_device(ctx_, static_cast<unsigned char *>(tensor_->allocation()) + begin_, b.data(), b.size());
  }

  xvk_context *ctx_;
  DType dtype_;
  Kind kind_;
  size_t elem_, numel_ = 0, begin_ = 0, end_ = 0;
  std::unique_ptr<Tensor> tensor_;
  TensorDesc desc_;
  Bytes head_, tail_;
};

// The same tensor on the GPU and on the CPU (or absent: NULL on both).
struct Pair {
  std::unique_ptr<Buf> b[2];
  DLTensor *dl(int side) const { return b[side] ? b[side]->dl() : nullptr; }
  Buf &gpu() const { return *b[kGpu]; }
  Buf &cpu() const { return *b[kCpu]; }
  explicit operator bool() const { return b[kGpu] != nullptr; }
  void write(const std::vector<float> &v) {
    for (auto &x : b) x->write(v);
  }
};

Pair both(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, DType t, bool misaligned,
          Kind kind = Kind::values) {
  Pair p;
  for (int side : {kGpu, kCpu}) p.b[side] = std::make_unique<Buf>(side, shape, strides, t, misaligned, kind);
  return p;
}
Pair act(const Geometry &g, DType t, bool misaligned) { return both(g.shape, g.strides, t, misaligned); }
Pair act_in(const Geometry &g, DType t, bool misaligned, const std::vector<float> &v) {
  Pair p = act(g, t, misaligned);
  p.write(v);
  return p;
}
Pair vec(int64_t c, bool misaligned) { return both({c}, {}, DType::f32, misaligned); }
Pair vec_in(bool misaligned, const std::vector<float> &v) {
  Pair p = vec(int64_t(v.size()), misaligned);
  p.write(v);
  return p;
}
Pair mask_pair(int64_t words, bool misaligned, bool int32) {
  return both({words}, {}, DType::f32, misaligned, int32 ? Kind::mask_i32 : Kind::mask_u32);
}

int64_t mask_words(const Geometry &g) {
  DLTensor t{};
  t.ndim = int32_t(g.shape.size());
  t.shape = const_cast<int64_t *>(g.shape.data());
  int64_t words = -1;
  XVK_OK(xvk_batch_norm_mask_words(&t, &words));
  REQUIRE(words == (g.numel() + 31) / 32);
  return words;
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------

std::vector<double> base_floor(const std::vector<float> &ref, double input_scale) {
  return agreement_floor(std::vector<double>(ref.begin(), ref.end()), input_scale);
}

// floor[e] = max(floor[e], per_channel[channel of e]) where that is finite.
void raise_floor(std::vector<double> &floor, const Geometry &g, const std::vector<double> &per_channel,
                 int64_t first = 0) {
  for (size_t e = 0; e < floor.size(); ++e) {
    const double f = per_channel[size_t(g.channel(first + int64_t(e)))];
    if (std::isfinite(f)) floor[e] = std::max(floor[e], f);
  }
}

// Floor of a per-channel output: agreement_floor raised by per_channel.
std::vector<double> channel_floor(const std::vector<float> &ref, double input_scale,
                                  const std::vector<double> &per_channel = {}) {
  std::vector<double> floor = base_floor(ref, input_scale);
  for (size_t ch = 0; ch < per_channel.size(); ++ch)
    if (std::isfinite(per_channel[ch])) floor[ch] = std::max(floor[ch], per_channel[ch]);
  return floor;
}

void expect_close(const std::string &label, const std::vector<float> &got, const std::vector<float> &ref,
                  const std::vector<double> &floor, DType t) {
  const Comparison c = compare(label, got, std::vector<double>(ref.begin(), ref.end()), floor, agreement_tolerance(t));
  CHECK_MESSAGE(c.ok, c.message());
}

template <class T>
bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

double max_magnitude(std::initializer_list<const std::vector<float> *> inputs) {
  double m = 0;
  for (const auto *v : inputs)
    if (v) m = std::max(m, max_finite_magnitude(*v));
  return m;
}

// Per-channel spread of x: the root mean square of its values, and their
// standard deviation (around the float64 mean).
struct Spread {
  std::vector<double> rms, std;
};
Spread spread_of(const Geometry &g, const std::vector<float> &x) {
  const size_t c = size_t(g.c);
  std::vector<double> sum(c, 0.0), sq(c, 0.0), count(c, 0.0);
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t ch = size_t(g.channel(int64_t(e)));
    sum[ch] += x[e];
    sq[ch] += double(x[e]) * double(x[e]);
    count[ch] += 1;
  }
  Spread s{std::vector<double>(c), std::vector<double>(c, 0.0)};
  for (size_t ch = 0; ch < c; ++ch) s.rms[ch] = std::sqrt(sq[ch] / count[ch]), sum[ch] /= count[ch];
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t ch = size_t(g.channel(int64_t(e)));
    s.std[ch] += (double(x[e]) - sum[ch]) * (double(x[e]) - sum[ch]) / count[ch];
  }
  for (double &v : s.std) v = std::sqrt(v);
  return s;
}

// The y floor's BatchNorm terms (see the head of the file), as a floor of the
// agreement bound of dtype t: two float32 ulps of the mean (its
// representation) and, for the training forward (spread given), the error
// that the mean's own check allows, agree(float32) * std; both times
// rstd * |gamma|.
std::vector<double> y_mean_term(const std::vector<double> &mean, const std::vector<double> &rstd,
                                const std::vector<float> *gamma, DType t, const std::vector<double> *std_dev = nullptr) {
  std::vector<double> out(mean.size());
  const double agree32 = agreement_tolerance(DType::f32).out;
  for (size_t ch = 0; ch < mean.size(); ++ch)
    out[ch] = (std::ldexp(std::fabs(mean[ch]), -22) + (std_dev ? agree32 * (*std_dev)[ch] : 0.0)) * rstd[ch] *
              (gamma ? std::fabs((*gamma)[ch]) : 1.0) / agreement_tolerance(t).out;
  return out;
}

// The CPU's pre-activation (x - mean) * rstd * gamma + beta (+ z) in float64,
// for elements [first, first + x.size()) of memory order.
std::vector<double> preactivation(const Geometry &g, const std::vector<float> &x, const std::vector<float> *z,
                                  const std::vector<double> &mean, const std::vector<double> &rstd,
                                  const std::vector<float> *gamma, const std::vector<float> *beta, int64_t first = 0) {
  std::vector<double> v(x.size());
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t ch = size_t(g.channel(first + int64_t(e)));
    v[e] = (double(x[e]) - mean[ch]) * rstd[ch] * (gamma ? double((*gamma)[ch]) : 1.0) +
           (beta ? double((*beta)[ch]) : 0.0) + (z ? double((*z)[e]) : 0.0);
  }
  return v;
}

// The mask of `count` elements starting at a word boundary (see the head of
// the file for the rules). at_end: these are the tensor's last elements.
void check_mask(const std::string &label, int64_t count, bool at_end, const std::vector<uint32_t> &gpu,
                const std::vector<uint32_t> &cpu, const std::vector<float> &gpu_y, const std::vector<double> &pre,
                const std::vector<double> &y_floor, DType t) {
  INFO(label);
  const size_t words = size_t((count + 31) / 32);
  REQUIRE(gpu.size() == words);
  REQUIRE(cpu.size() == words);
  const double agree = agreement_tolerance(t).out;
  int64_t inconsistent = 0, differ = 0, tolerated = 0, first_inconsistent = -1, first_differ = -1;
  for (int64_t e = 0; e < count; ++e) {
    const bool gb = (gpu[size_t(e / 32)] >> (e % 32)) & 1u, cb = (cpu[size_t(e / 32)] >> (e % 32)) & 1u;
    if (gb != (gpu_y[size_t(e)] > 0.0f) && inconsistent++ == 0) first_inconsistent = e;
    if (gb == cb) continue;
    const double v = pre[size_t(e)];
    if (std::isfinite(v) && std::fabs(v) <= agree * (std::fabs(v) + y_floor[size_t(e)]))
      ++tolerated;
    else if (differ++ == 0)
      first_differ = e;
  }
  CHECK_MESSAGE(inconsistent == 0, label << ": " << inconsistent << " mask bits are not \"y > 0\" of the GPU's y; first at element "
                                         << first_inconsistent << " (y "
                                         << (first_inconsistent >= 0 ? gpu_y[size_t(first_inconsistent)] : 0.0f) << ")");
  CHECK_MESSAGE(differ == 0, label << ": " << differ << " mask bits differ from the CPU's where the pre-activation is not tiny ("
                                   << tolerated << " tolerated); first at element " << first_differ << ", pre-activation "
                                   << (first_differ >= 0 ? pre[size_t(first_differ)] : 0.0));
  if (at_end && count % 32 != 0)
    CHECK_MESSAGE((gpu.back() >> (count % 32)) == 0u, label << ": bits past the last element are not 0 (last word 0x"
                                                           << std::hex << gpu.back() << std::dec << ")");
}

// Per-channel floors of the backward (see the head of the file): dx's
// rstd * |gamma| * max |g|, and the root of the sum of the squared terms of
// dbeta (g) and dgamma (g * xhat). y_relu: the forward's y under ReLU (g = dy
// where y > 0), else NULL. weight: how many times each term counts (the 2^31
// case computes them on a tensor that stands for N / P copies of itself).
struct BackwardFloors {
  std::vector<double> dx, dgamma, dbeta;
};
BackwardFloors backward_floors(const Geometry &g, const std::vector<float> &x, const std::vector<float> &dy,
                               const std::vector<float> *y_relu, const std::vector<float> &mean,
                               const std::vector<float> &rstd, const std::vector<float> *gamma, double weight = 1) {
  const size_t c = size_t(g.c);
  std::vector<double> gmax(c, 0.0);
  BackwardFloors f{std::vector<double>(c), std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t ch = size_t(g.channel(int64_t(e)));
    const double ge = y_relu && !((*y_relu)[e] > 0.0f) ? 0.0 : double(dy[e]);
    const double gx = ge * (double(x[e]) - double(mean[ch])) * double(rstd[ch]);
    gmax[ch] = std::max(gmax[ch], std::fabs(ge));
    f.dbeta[ch] += ge * ge * weight;
    f.dgamma[ch] += gx * gx * weight;
  }
  for (size_t ch = 0; ch < c; ++ch) {
    f.dbeta[ch] = std::sqrt(f.dbeta[ch]);
    f.dgamma[ch] = std::sqrt(f.dgamma[ch]);
    f.dx[ch] = double(rstd[ch]) * (gamma ? std::fabs(double((*gamma)[ch])) : 1.0) * gmax[ch];
  }
  return f;
}

// All of channel ch is NaN and nothing else is.
void check_nan_channel(const std::string &label, const Geometry &g, const std::vector<float> &v, int64_t ch,
                       bool per_channel_vector = false) {
  int64_t finite_in = 0, nan_out = 0;
  for (size_t e = 0; e < v.size(); ++e) {
    const int64_t c = per_channel_vector ? int64_t(e) : g.channel(int64_t(e));
    if (c == ch ? !std::isnan(v[e]) : std::isnan(v[e])) ++(c == ch ? finite_in : nan_out);
  }
  CHECK_MESSAGE(finite_in == 0, label << ": " << finite_in << " values of the NaN channel " << ch << " are not NaN");
  CHECK_MESSAGE(nan_out == 0, label << ": " << nan_out << " values outside channel " << ch << " are NaN");
}

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

struct Features {
  bool relu = false, z = false, gamma = true, beta = true;
  bool mask = false;        // the GPU's forwards write the mask (the CPU's training forward always does under ReLU)
  bool from_mask = false;   // ReLU: the backward reads the (CPU's) mask, else the (CPU's) y
  bool int32_mask = false;  // mask words typed int32 instead of uint32
  bool running = true;      // training forward updates running_mean/var
  bool gpu_saved = true;    // the GPU's training forward writes saved_mean/rstd
  bool dz = true;           // with z: the backward writes dz
  bool dparams = true;      // the backward writes dgamma and dbeta
  int misalign = 0;         // 0 none, 1 every tensor, 2 only the one named `one`
  const char *one = "";
};

constexpr int kCombos = 8;
Features combo(int i) {
  Features f;
  switch (i % kCombos) {
    case 0: break;  // NONE, gamma and beta, aligned
    case 1: f.relu = f.mask = f.from_mask = true; break;
    case 2: f.relu = f.z = f.mask = f.from_mask = true, f.misalign = 1; break;
    case 3: f.relu = f.z = true, f.gamma = f.beta = false; break;  // backward from y, no mask at all
    case 4: f.z = true, f.beta = false, f.misalign = 2; break;
    case 5:  // mask written, backward from y anyway; outputs left out
      f.relu = f.mask = true, f.gamma = false, f.running = f.gpu_saved = f.dparams = false;
      break;
    case 6: f.gamma = f.beta = f.running = false, f.misalign = 1; break;
    default: f.relu = f.z = f.mask = f.from_mask = f.int32_mask = true, f.dz = false, f.misalign = 2; break;
  }
  return f;
}
const char *const kMisalignable[] = {"x", "z", "y", "dy", "dx", "dz", "mask", "gamma", "beta", "running", "saved", "dparams"};

struct Case {
  DType t = DType::f32;
  int64_t n = 2, c = 3;
  std::vector<int64_t> spatial;
  Mem mem = Mem::first;
  bool alt_axis = false;
  Features f;
  double mean = 0, sd = 1;  // channel means: N(0, 1) if mean is 0, else mean * (1 + 0.01 N(0, 1)); stds sd * U(0.5, 2)
  bool nan = false;         // a NaN in channel c / 2
  bool outlier = false;     // each channel's first element (n = 0, s = 0) moved 1000 of its stds up
  bool determinism = true;
  float epsilon = 1e-5f, momentum = 0.1f;
};

Case make_case(DType t, int64_t n, int64_t c, std::vector<int64_t> spatial, Mem mem, int combo_index) {
  static int counter = 0;
  ++counter;
  Case k;
  k.t = t;
  k.n = n;
  k.c = c;
  k.spatial = std::move(spatial);
  k.mem = mem;
  k.f = combo(combo_index);
  if (k.f.misalign == 2)
    k.f.one = kMisalignable[g_rng.integer(0, int64_t(sizeof kMisalignable / sizeof kMisalignable[0]) - 1)];
  static const float eps[] = {1e-5f, 1e-3f, 1e-5f, 0.1f}, momenta[] = {0.1f, 0.3f, 1.0f, 0.0f};
  k.epsilon = eps[counter % 4];
  k.momentum = momenta[(counter / 4) % 4];
  k.alt_axis = counter % 2 != 0;
  return k;
}

std::string describe(const Case &k, const Geometry &g) {
  const Features &f = k.f;
  std::string s = std::string("batch_norm ") + dtype_name(k.t) + " " + g.str();
  s += f.relu ? " relu" : " none";
  if (f.z) s += " z";
  if (f.gamma) s += " gamma";
  if (f.beta) s += " beta";
  if (f.relu) s += std::string(f.mask ? " mask" : " no-mask") + (f.from_mask ? " bwd-from-mask" : " bwd-from-y");
  if (f.int32_mask) s += " int32-mask";
  if (!f.running) s += " no-running";
  if (!f.gpu_saved) s += " no-saved";
  if (f.z && !f.dz) s += " no-dz";
  if (!f.dparams) s += " no-dgamma-dbeta";
  if (f.misalign == 1) s += " misaligned(all)";
  if (f.misalign == 2) s += std::string(" misaligned(") + f.one + ")";
  if (k.mean != 0) s += " mean " + std::to_string(k.mean) + " std " + std::to_string(k.sd);
  if (k.nan) s += " NaN in channel " + std::to_string(k.c / 2);
  if (k.outlier) s += " first element 1000 stds out";
  char tail[64];
  std::snprintf(tail, sizeof tail, " eps %g momentum %g", double(k.epsilon), double(k.momentum));
  return s + tail;
}

// Per-channel means and stds, and x in memory order.
struct Data {
  std::vector<double> mu, sd;
  std::vector<float> x;
};

Data make_data(const Geometry &g, DType t, double mean, double sd) {
  Data d;
  d.mu.resize(size_t(g.c));
  d.sd.resize(size_t(g.c));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 2.0);
  for (int64_t ch = 0; ch < g.c; ++ch) {
    d.mu[size_t(ch)] = mean == 0 ? normal(g_rng.engine()) : mean * (1.0 + 0.01 * normal(g_rng.engine()));
    d.sd[size_t(ch)] = sd * uniform(g_rng.engine());
  }
  const std::vector<float> unit = g_rng.normal(size_t(g.numel()), 0.0, 1.0);
  d.x.resize(unit.size());
  for (size_t e = 0; e < unit.size(); ++e) {
    const size_t ch = size_t(g.channel(int64_t(e)));
    d.x[e] = round_to(t, float(d.mu[ch] + d.sd[ch] * double(unit[e])));
  }
  return d;
}

std::vector<double> to_double(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }

void run_case(const Case &k) {
  const Geometry g = geometry(k.n, k.c, k.spatial, k.mem, k.alt_axis);
  const std::string what = describe(k, g);
  INFO(what);
  const Features &f = k.f;
  const DType t = k.t;
  const int64_t numel = g.numel(), C = k.c, m = k.n * g.s;
  const size_t uc = size_t(C);
  auto mis = [&f](const char *name) { return f.misalign == 1 || (f.misalign == 2 && std::strcmp(f.one, name) == 0); };

  // Inputs, memory order.
  Data d = make_data(g, t, k.mean, k.sd);
  const int64_t nan_channel = k.nan ? C / 2 : -1;
  if (k.nan) d.x[size_t(g.position(0, nan_channel, g.s / 2))] = NAN;
  if (k.outlier)
    for (int64_t ch = 0; ch < C; ++ch) {
      float &first = d.x[size_t(g.position(0, ch, 0))];
      first = round_to(t, float(double(first) + 1000.0 * d.sd[size_t(ch)]));
    }
  const std::vector<float> &x = d.x;
  const std::vector<float> z = f.z ? g_rng.normal(size_t(numel), 0.0, 1.0, t) : std::vector<float>{};
  const std::vector<float> dy = g_rng.normal(size_t(numel), 0.0, 1.0, t);
  const std::vector<float> gamma = g_rng.normal(uc, 1.0, 0.3), beta = g_rng.normal(uc, 0.0, 0.3);
  const std::vector<float> rm0 = g_rng.normal(uc, 0.0, 1.0), rv0 = g_rng.uniform(uc, 0.5, 1.5);
  std::vector<float> rmi(uc), rvi(uc);  // inference statistics near the data's
  {
    const std::vector<float> a = g_rng.normal(uc, 0.0, 0.1), b = g_rng.uniform(uc, 0.8, 1.25);
    for (size_t ch = 0; ch < uc; ++ch) {
      rmi[ch] = float(d.mu[ch] + d.sd[ch] * double(a[ch]));
      rvi[ch] = float(d.sd[ch] * d.sd[ch] * double(b[ch]));
    }
  }
  const std::vector<float> *zp = f.z ? &z : nullptr, *gp = f.gamma ? &gamma : nullptr, *bp = f.beta ? &beta : nullptr;

  xvk_batch_norm_options o = XVK_BATCH_NORM_OPTIONS_INIT;
  o.epsilon = k.epsilon;
  o.momentum = k.momentum;
  o.activation = f.relu ? XVK_ACTIVATION_RELU : XVK_ACTIVATION_NONE;
  o.channel_axis = g.axis;
  const int64_t words = mask_words(g);

  Pair X = act_in(g, t, mis("x"), x), Z, G, B;
  if (f.z) Z = act_in(g, t, mis("z"), z);
  if (f.gamma) G = vec_in(mis("gamma"), gamma);
  if (f.beta) B = vec_in(mis("beta"), beta);

  // ---- training forward ----
  const bool training = m > 1;
  std::vector<float> y_cpu, sm_cpu, sr_cpu;
  std::vector<uint32_t> mask_cpu;
  if (training) {
    const double input_scale = max_magnitude({&x, zp, gp, bp, &rm0, &rv0});
    Pair Y = act(g, t, mis("y")), SM = vec(C, mis("saved")), SR = vec(C, mis("saved")), RM, RV, MK;
    if (f.running) RM = vec_in(mis("running"), rm0), RV = vec_in(mis("running"), rv0);
    if (f.relu) MK = mask_pair(words, mis("mask"), f.int32_mask);
    auto run = [&](int side) {
      const bool gpu = side == kGpu;
      return xvk_batch_norm_forward_training(context(side), X.dl(side), Z.dl(side), G.dl(side), B.dl(side), &o,
                                             Y.dl(side), gpu && !f.mask ? nullptr : MK.dl(side), RM.dl(side),
                                             RV.dl(side), gpu && !f.gpu_saved ? nullptr : SM.dl(side),
                                             gpu && !f.gpu_saved ? nullptr : SR.dl(side));
    };
    XVK_OK(run(kCpu));
    XVK_OK(run(kGpu));
    XVK_OK(xvk_context_synchronize(g_gpu));
    y_cpu = Y.cpu().read();
    sm_cpu = SM.cpu().read();
    sr_cpu = SR.cpu().read();
    if (f.relu) mask_cpu = MK.cpu().read_words();
    const std::vector<double> mean = to_double(sm_cpu), rstd = to_double(sr_cpu);
    const Spread spread = spread_of(g, x);

    const std::vector<float> y = Y.gpu().read();
    std::vector<double> y_floor = base_floor(y_cpu, input_scale);
    raise_floor(y_floor, g, y_mean_term(mean, rstd, gp, t, &spread.std));
    expect_close("training y", y, y_cpu, y_floor, t);
    CHECK_MESSAGE(Y.gpu().guards_intact(), "training y: bytes outside its elements changed");
    std::vector<float> sm, sr, rm, rv;
    if (f.gpu_saved) {
      sm = SM.gpu().read();
      sr = SR.gpu().read();
      expect_close("saved_mean", sm, sm_cpu, channel_floor(sm_cpu, input_scale, spread.rms), DType::f32);
      expect_close("saved_rstd", sr, sr_cpu, channel_floor(sr_cpu, input_scale), DType::f32);
      CHECK_MESSAGE((SM.gpu().guards_intact() && SR.gpu().guards_intact()), "saved statistics: guards changed");
    }
    if (f.running) {
      rm = RM.gpu().read();
      rv = RV.gpu().read();
      const std::vector<float> rm_cpu = RM.cpu().read(), rv_cpu = RV.cpu().read();
      expect_close("running_mean", rm, rm_cpu, channel_floor(rm_cpu, input_scale, spread.rms), DType::f32);
      expect_close("running_var", rv, rv_cpu, channel_floor(rv_cpu, input_scale), DType::f32);
      CHECK_MESSAGE((RM.gpu().guards_intact() && RV.gpu().guards_intact()), "running statistics: guards changed");
    }
    std::vector<uint32_t> mask;
    if (f.relu && f.mask) {
      mask = MK.gpu().read_words();
      check_mask("training mask", numel, true, mask, mask_cpu, y, preactivation(g, x, zp, mean, rstd, gp, bp), y_floor,
                 t);
      CHECK_MESSAGE(MK.gpu().guards_intact(), "training mask: words outside the mask changed");
    }
    if (k.nan) {
      check_nan_channel("training y", g, y, nan_channel);
      if (f.gpu_saved) {
        check_nan_channel("saved_mean", g, sm, nan_channel, true);
        check_nan_channel("saved_rstd", g, sr, nan_channel, true);
      }
      if (f.running) check_nan_channel("running_var", g, rv, nan_channel, true);
    }
    if (k.determinism) {
      Y.gpu().poison();
      SM.gpu().poison();
      SR.gpu().poison();
      if (f.relu) MK.gpu().poison();
      if (f.running) RM.gpu().write(rm0), RV.gpu().write(rv0);
      XVK_OK(run(kGpu));
      XVK_OK(xvk_context_synchronize(g_gpu));
      CHECK_MESSAGE(same_bits(Y.gpu().read(), y), "training y differs between two identical runs");
      if (f.gpu_saved) {
        CHECK_MESSAGE(same_bits(SM.gpu().read(), sm), "saved_mean differs between two identical runs");
        CHECK_MESSAGE(same_bits(SR.gpu().read(), sr), "saved_rstd differs between two identical runs");
      }
      if (f.running) {
        CHECK_MESSAGE(same_bits(RM.gpu().read(), rm), "running_mean differs between two identical runs");
        CHECK_MESSAGE(same_bits(RV.gpu().read(), rv), "running_var differs between two identical runs");
      }
      if (f.relu && f.mask)
        CHECK_MESSAGE(same_bits(MK.gpu().read_words(), mask), "training mask differs between two identical runs");
    }
  }

  // ---- inference forward ----
  {
    const double input_scale = max_magnitude({&x, zp, gp, bp, &rmi, &rvi});
    Pair Y = act(g, t, mis("y")), RM = vec_in(mis("running"), rmi), RV = vec_in(mis("running"), rvi), MK;
    if (f.relu && f.mask) MK = mask_pair(words, mis("mask"), f.int32_mask);
    auto run = [&](int side) {
      return xvk_batch_norm_forward_inference(context(side), X.dl(side), Z.dl(side), G.dl(side), B.dl(side),
                                              RM.dl(side), RV.dl(side), &o, Y.dl(side), MK.dl(side));
    };
    XVK_OK(run(kCpu));
    XVK_OK(run(kGpu));
    XVK_OK(xvk_context_synchronize(g_gpu));
    std::vector<double> mean(uc), rstd(uc);
    for (size_t ch = 0; ch < uc; ++ch) {
      mean[ch] = rmi[ch];
      rstd[ch] = 1.0 / std::sqrt(double(rvi[ch]) + double(k.epsilon));
    }
    const std::vector<float> y = Y.gpu().read(), y_ref = Y.cpu().read();
    std::vector<double> y_floor = base_floor(y_ref, input_scale);
    raise_floor(y_floor, g, y_mean_term(mean, rstd, gp, t));
    expect_close("inference y", y, y_ref, y_floor, t);
    CHECK_MESSAGE(Y.gpu().guards_intact(), "inference y: bytes outside its elements changed");
    if (MK) {
      check_mask("inference mask", numel, true, MK.gpu().read_words(), MK.cpu().read_words(), y,
                 preactivation(g, x, zp, mean, rstd, gp, bp), y_floor, t);
      CHECK_MESSAGE(MK.gpu().guards_intact(), "inference mask: words outside the mask changed");
    }
  }

  // ---- backward, from the CPU forward's y or mask and statistics ----
  if (training) {
    Pair DY = act_in(g, t, mis("dy"), dy), SM = vec_in(mis("saved"), sm_cpu), SR = vec_in(mis("saved"), sr_cpu);
    Pair MK, YIN, DX = act(g, t, mis("dx")), DZ, DG, DB;
    if (f.relu && f.from_mask) {
      MK = mask_pair(words, mis("mask"), f.int32_mask);
      for (auto &b : MK.b) b->write_words(mask_cpu);
    }
    if (f.relu && !f.from_mask) YIN = act_in(g, t, mis("y"), y_cpu);
    if (f.z && f.dz) DZ = act(g, t, mis("dz"));
    if (f.dparams) DG = vec(C, mis("dparams")), DB = vec(C, mis("dparams"));
    auto run = [&](int side) {
      return xvk_batch_norm_backward(context(side), DY.dl(side), X.dl(side), MK.dl(side), YIN.dl(side), G.dl(side),
                                     SM.dl(side), SR.dl(side), &o, DX.dl(side), DZ.dl(side), DG.dl(side),
                                     DB.dl(side));
    };
    XVK_OK(run(kCpu));
    XVK_OK(run(kGpu));
    XVK_OK(xvk_context_synchronize(g_gpu));
    const double input_scale = max_magnitude({&dy, &x, gp, &sm_cpu, &sr_cpu});
    const BackwardFloors bf = backward_floors(g, x, dy, f.relu ? &y_cpu : nullptr, sm_cpu, sr_cpu, gp);
    const std::vector<float> dx = DX.gpu().read(), dx_cpu = DX.cpu().read();
    std::vector<double> dx_floor = base_floor(dx_cpu, input_scale);
    raise_floor(dx_floor, g, bf.dx);
    expect_close("dx", dx, dx_cpu, dx_floor, t);
    CHECK_MESSAGE(DX.gpu().guards_intact(), "dx: bytes outside its elements changed");
    if (DZ) {
      // dz = g: an exact copy of dy or 0.
      expect_close("dz", DZ.gpu().read(), DZ.cpu().read(), std::vector<double>(size_t(numel), 0.0), t);
      CHECK_MESSAGE(DZ.gpu().guards_intact(), "dz: bytes outside its elements changed");
    }
    std::vector<float> dgamma, dbeta;
    if (f.dparams) {
      dgamma = DG.gpu().read();
      dbeta = DB.gpu().read();
      const std::vector<float> dg_cpu = DG.cpu().read(), db_cpu = DB.cpu().read();
      expect_close("dgamma", dgamma, dg_cpu, channel_floor(dg_cpu, input_scale, bf.dgamma), DType::f32);
      expect_close("dbeta", dbeta, db_cpu, channel_floor(db_cpu, input_scale, bf.dbeta), DType::f32);
      CHECK_MESSAGE((DG.gpu().guards_intact() && DB.gpu().guards_intact()), "dgamma/dbeta: guards changed");
    }
    if (k.nan) {
      check_nan_channel("dx", g, dx, nan_channel);
      if (f.dparams) check_nan_channel("dgamma", g, dgamma, nan_channel, true);
    }
    if (k.determinism) {
      DX.gpu().poison();
      if (DZ) DZ.gpu().poison();
      if (f.dparams) DG.gpu().poison(), DB.gpu().poison();
      XVK_OK(run(kGpu));
      XVK_OK(xvk_context_synchronize(g_gpu));
      CHECK_MESSAGE(same_bits(DX.gpu().read(), dx), "dx differs between two identical runs");
      if (f.dparams) {
        CHECK_MESSAGE(same_bits(DG.gpu().read(), dgamma), "dgamma differs between two identical runs");
        CHECK_MESSAGE(same_bits(DB.gpu().read(), dbeta), "dbeta differs between two identical runs");
      }
    }
  }
}

const Mem kMems[] = {Mem::first, Mem::last, Mem::nhwc};

struct Dims {
  int64_t n, c;
  std::vector<int64_t> spatial;
};

}  // namespace

TEST_CASE("batch_norm: every option combination, every dtype and memory order") {
  for (DType t : kAllDtypes)
    for (Mem mem : kMems)
      for (int k = 0; k < kCombos; ++k) run_case(make_case(t, 3, 7, {5, 5}, mem, k));
  for (DType t : kAllDtypes)
    for (int k = 0; k < kCombos; ++k) run_case(make_case(t, 37, 7, {}, Mem::first, k));
}

TEST_CASE("batch_norm: C in {1, 3, 5, 7, 64, 1000, 2049}, H*W in {1, 49, 13, 196, 12544}, N in {1, 2, 3, 32}") {
  const std::vector<Dims> shapes =
      kQuick ? std::vector<Dims>{{2, 3, {7, 7}}, {32, 1, {1, 13}}, {32, 64, {7, 7}}, {3, 1000, {1, 1}},
                                 {2, 2049, {13, 1}}, {1, 5, {1, 1}}}
             : std::vector<Dims>{{2, 3, {7, 7}},     {32, 1, {1, 13}},     {3, 5, {14, 14}},  {1, 7, {112, 112}},
                                 {32, 64, {7, 7}},   {3, 1000, {1, 1}},    {32, 1000, {1, 1}}, {2, 2049, {13, 1}},
                                 {1, 2049, {14, 14}}, {32, 7, {14, 14}},   {3, 2049, {7, 7}}, {1, 5, {1, 1}},
                                 {2, 1, {1, 1}}};
  int i = 0;
  for (DType t : kAllDtypes)
    for (Mem mem : kMems)
      for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, mem, i++));
  // 112 x 112 with 64 channels (1.6M elements): float16 only, every memory order.
  if (!kQuick)
    for (Mem mem : kMems) run_case(make_case(DType::f16, 2, 64, {112, 112}, mem, i++));
}

TEST_CASE("batch_norm: channels-first planes of no whole vector with N >= 64 (statistics by columns)") {
  // Rows of 8, 4, 2 and 1 whole vectors' width in 16-bit (C * H * W = 392,
  // 196, 294, 65), planes of 49 and 13 elements, vectors across channels;
  // and planes of 196 (14 x 14, as ResNet's 256 x 1024 x 14 x 14: by
  // columns in 16-bit, whole vectors by channel in float32). The gradient
  // sums take spans of channels (reduce_spans) where C * H * W is whole
  // vectors: one group ({64, 8, {7, 7}}), and groups of 40 or 20 channels
  // with a short last one (88 = 2 x 40 + 8 in 16-bit, 4 x 20 + 8 in float32;
  // 24 = 10 + 10 + 4 at 14 x 14 in 16-bit; 60 = 40 + 20 at 5 x 5 in float32);
  // odd N leaves a sample alone in a thread's last batch where the grid has
  // fewer parts than samples (the next test case).
  const std::vector<Dims> shapes = {{64, 8, {7, 7}},   {65, 4, {7, 7}},    {64, 6, {7, 7}},  {96, 5, {13, 1}},
                                    {64, 3, {14, 14}}, {97, 88, {7, 7}}, {64, 24, {14, 14}}, {70, 60, {5, 5}}};
  int i = 0;
  for (DType t : kAllDtypes)
    for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, Mem::first, i++));
}

// Every dtype: a large-offset case (float32 means near 1e4 with std 1e-2,
// 16-bit near 100) of shape `offset`, and a NaN case of shape `nan`.
void run_offset_and_nan_cases(const Dims &offset, Mem offset_mem, const Dims &nan, Mem nan_mem) {
  for (DType t : kAllDtypes) {
    Case k = make_case(t, offset.n, offset.c, offset.spatial, offset_mem, 1);
    if (t == DType::f32) k.mean = 1e4, k.sd = 1e-2, k.epsilon = 1e-5f;
    else k.mean = 100;
    run_case(k);
    Case n = make_case(t, nan.n, nan.c, nan.spatial, nan_mem, 4);
    n.nan = true;
    run_case(n);
  }
}

TEST_CASE("batch_norm: channels-first shapes of the channel-group forward (whole channels a block)") {
  // forward_channel_groups: groups of the fewest channels whose per-sample
  // runs are whole 16-byte vectors (16-bit: 8 channels of 7 x 7, 5 x 5 or
  // 3 x 3, 4 of 1 x 10, 2 of 14 x 14, 1 of 6 x 4 or 8 x 8; float32: 4, 4, 4,
  // 2, 1, 1, 1), so a vector holds two channels' elements and the runs' first
  // and last mask words are shared with the neighbouring groups' blocks; odd
  // N; tensors whose end is not a whole mask word; a group's planes in about
  // 200 KB of shared memory (256 x 16 x 7 x 7 in 16-bit, 256 x 2 x 14 x 14 in
  // float32: two passes as tuned); more groups than blocks (3 x 2048 x 7 x 7,
  // 5 x 600 x 14 x 14), which the streamed form's persistent blocks walk. As
  // tuned the kernel takes the rest of them; under XVK_BATCH_NORM_GROUPS=1
  // all, under =2 the streamed form the 16-bit ones without z, under =0 none
  // (bench/run_on_gpu.sh bntest runs each).
  const std::vector<Dims> shapes = {{97, 16, {7, 7}}, {33, 6, {14, 14}}, {5, 24, {3, 3}},   {3, 40, {5, 5}},
                                    {200, 8, {1, 10}}, {50, 7, {6, 4}},  {40, 3, {8, 8}},   {256, 16, {7, 7}},
                                    {256, 2, {14, 14}}, {3, 2048, {7, 7}}, {5, 600, {14, 14}}};
  int i = 0;
  for (DType t : kAllDtypes)
    for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, Mem::first, i++));
  run_offset_and_nan_cases({9, 16, {7, 7}}, Mem::first, {9, 16, {7, 7}}, Mem::first);
}

TEST_CASE("batch_norm: channels-first gradient sums by spans with many samples per block") {
  // The shapes above give reduce_spans one sample per block (as many parts
  // as samples); these give its blocks (a wave of them) 2 to ~40 samples: full
  // and partial batches and, in float32, more than kSettleBatches batches.
  const std::vector<Dims> shapes = {{64, 360, {7, 7}}, {192, 2048, {7, 7}}};
  int i = 0;
  for (DType t : {DType::f32, DType::f16})
    for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, Mem::first, i++));
}

TEST_CASE("batch_norm: channels-last shapes of the single-pass forward (rows of 1 to 32 whole vectors)") {
  // C = 8 .. 256: 1, 2, 4, 16, 32 vectors a row in 16-bit (2 .. 64 in
  // float32, where 256 is too many and takes two passes); rows that are not
  // a whole number of mask words' rows (75 rows of 8), fewer rows than
  // blocks, ~100 rows per block (16 x 32 x 28 x 28). Under
  // XVK_BATCH_NORM_SINGLE_PASS=0 these are the two-pass kernels' cases.
  const std::vector<Dims> shapes = {{3, 8, {5, 5}}, {2, 16, {9, 7}}, {16, 32, {28, 28}}, {2, 128, {13, 13}},
                                    {1, 256, {30, 30}}, {3, 32, {1, 1}}};
  int i = 0;
  for (DType t : kAllDtypes)
    for (Mem mem : {Mem::last, Mem::nhwc})
      for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, mem, i++));
  run_offset_and_nan_cases({4, 32, {7, 7}}, Mem::nhwc, {4, 16, {7, 7}}, Mem::last);
}

TEST_CASE("batch_norm: channels-last shapes of the held single pass (rows of 64 to 1024 vectors)") {
  // forward_single_pass_held: 64, 128, 256 and 1024 vectors a row in 16-bit
  // (128 .. 1024 in float32; 8192 channels, 2048 vectors, take two passes
  // there), and rows fewer than blocks (1 x 8192 x 3 x 3). Its re-read rows
  // need tensors larger than the tiles, or XVK_BATCH_NORM_HELD_KIB (run by
  // bench/run_on_gpu.sh bntest with 0 and 16); without
  // XVK_BATCH_NORM_SINGLE_PASS=1 these are the two-pass kernels' cases.
  const std::vector<Dims> shapes = {{4, 512, {7, 7}}, {3, 1024, {5, 3}}, {2, 2048, {7, 7}}, {1, 8192, {3, 3}},
                                    {2, 4096, {2, 3}}};
  int i = 0;
  for (DType t : kAllDtypes)
    for (Mem mem : {Mem::last, Mem::nhwc})
      for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, mem, i++));
}

TEST_CASE("batch_norm: the (N, C) case") {
  const std::vector<Dims> shapes =
      kQuick ? std::vector<Dims>{{3, 5, {}}, {32, 2049, {}}, {4096, 3, {}}, {1, 13, {}}}
             : std::vector<Dims>{{2, 1, {}},   {3, 5, {}},      {32, 7, {}},    {32, 2049, {}}, {2, 1000, {}},
                                 {1000, 64, {}}, {4096, 3, {}}, {1, 13, {}},   {257, 1000, {}}};
  int i = 3;
  for (DType t : kAllDtypes)
    for (const Dims &s : shapes) run_case(make_case(t, s.n, s.c, s.spatial, Mem::first, i++));
}

TEST_CASE("batch_norm: random odd shapes with 1 to 3 spatial dimensions") {
  static const int64_t kC[] = {1, 3, 5, 7, 64, 1000, 2049}, kN[] = {1, 2, 3, 32};
  const int cases = kQuick ? 12 : 48;
  for (int i = 0; i < cases; ++i) {
    const DType t = kAllDtypes[g_rng.integer(0, 2)];
    const int spatial_ndim = int(g_rng.integer(0, 3));
    const Mem mem = kMems[g_rng.integer(0, 2)];
    int64_t n = g_rng.integer(0, 1) ? kN[g_rng.integer(0, 3)] : g_rng.integer(1, 40);
    const int64_t c = g_rng.integer(0, 1) ? kC[g_rng.integer(0, 6)] : (g_rng.integer(1, 150) | 1);
    std::vector<int64_t> spatial;
    for (int k = 0; k < spatial_ndim; ++k) spatial.push_back(g_rng.integer(1, spatial_ndim == 3 ? 9 : 31) | 1);
    // At most ~600k elements.
    while (n * c * product(spatial) > 600000) {
      if (n > 1)
        n = (n + 1) / 2;
      else
        for (int64_t &d : spatial) d = std::max<int64_t>(1, d / 2) | 1;
    }
    run_case(make_case(t, n, c, spatial, mem, int(g_rng.integer(0, kCombos - 1))));
  }
}

TEST_CASE("batch_norm: large M per channel and many channels channels-last") {
  // ~1e6 values per channel (float32 accumulation over M, see the head of the file).
  if (kQuick) {
    run_case(make_case(DType::f32, 64, 3, {64, 64}, Mem::first, 2));
  } else {
    run_case(make_case(DType::f32, 256, 3, {64, 64}, Mem::first, 2));
    run_case(make_case(DType::f16, 256, 3, {64, 64}, Mem::last, 0));
    run_case(make_case(DType::bf16, 256, 3, {64, 64}, Mem::nhwc, 1));
    run_case(make_case(DType::f32, 256, 3, {64, 64}, Mem::last, 7));
  }
  // 4099 channels in the innermost dimension.
  int i = 0;
  for (DType t : kAllDtypes)
    for (Mem mem : {Mem::last, Mem::nhwc})
      if (!kQuick || (t == DType::f32 && mem == Mem::last) || (t == DType::f16 && mem == Mem::nhwc))
        run_case(make_case(t, 8, 4099, {3, 3}, mem, i++));
}

TEST_CASE("batch_norm: large offsets (channel means near 1e4, std 1e-2, in float32)") {
  // float32: the variance must not be lost to cancellation (see the head of the file).
  std::vector<Case> cases = {make_case(DType::f32, 32, 3, {14, 14}, Mem::first, 0),
                             make_case(DType::f32, 8, 64, {13, 13}, Mem::last, 1),
                             make_case(DType::f32, 64, 5, {32, 32}, Mem::nhwc, 2),
                             make_case(DType::f32, 1024, 7, {}, Mem::first, 4)};
  if (!kQuick) cases.push_back(make_case(DType::f32, 256, 3, {64, 64}, Mem::first, 1));
  for (Case &k : cases) k.mean = 1e4, k.sd = 1e-2, k.epsilon = 1e-5f;
  // float16 and bfloat16 cannot hold std 1e-2 near 1e4: means near 100 with std 1 instead.
  for (DType t : {DType::f16, DType::bf16})
    for (Mem mem : {Mem::first, Mem::last}) {
      Case k = make_case(t, 32, 64, {7, 7}, mem, mem == Mem::first ? 2 : 0);
      k.mean = 100;
      cases.push_back(k);
    }
  for (const Case &k : cases) run_case(k);
}

TEST_CASE("batch_norm: a channel's first element 1000 stds from the rest, 2^20 values per channel") {
  // The statistics are taken around each channel's first element; batches
  // must use two passes, not sum of squares minus square of sum, or the
  // variance drifts by percents here (test_batch_norm_numerics.cpp shows the
  // tolerance rejecting that form on this data).
  int i = 0;
  for (DType t : {DType::f32, DType::f16})
    for (Mem mem : {Mem::first, Mem::last}) {
      if (kQuick && i > 0) break;
      Case k = make_case(t, 256, 2, {64, 64}, mem, i++ % 2 == 0 ? 1 : 4);
      k.outlier = true;
      run_case(k);
    }
}

TEST_CASE("batch_norm: a NaN in one channel makes that channel NaN and no other") {
  int i = 0;
  for (DType t : kAllDtypes)
    for (Mem mem : kMems) {
      Case k = make_case(t, 3, 5, {7, 7}, mem, i++ % 2 == 0 ? 1 : 4);
      k.nan = true;
      run_case(k);
    }
  for (DType t : kAllDtypes) {
    Case k = make_case(t, 32, 7, {}, Mem::first, 2);
    k.nan = true;
    run_case(k);
  }
}

TEST_CASE("batch_norm: in-place (y = x, y = z, dx = x, dz = dy)") {
  for (DType t : kAllDtypes)
    for (Mem mem : kMems) {
      const Geometry g = geometry(4, 5, {6, 7}, mem);
      const std::string what = std::string("in-place ") + dtype_name(t) + " " + g.str();
      INFO(what);
      const int64_t numel = g.numel(), words = mask_words(g);
      const Data d = make_data(g, t, 0.0, 1.0);
      const std::vector<float> z = g_rng.normal(size_t(numel), 0.0, 1.0, t), dy = g_rng.normal(size_t(numel), 0.0, 1.0, t);
      const std::vector<float> gamma = g_rng.normal(5, 1.0, 0.3), beta = g_rng.normal(5, 0.0, 0.3);
      const std::vector<float> rv = g_rng.uniform(5, 0.5, 1.5);
      xvk_batch_norm_options o = XVK_BATCH_NORM_OPTIONS_INIT;
      o.activation = XVK_ACTIVATION_RELU;
      o.channel_axis = g.axis;
      const double input_scale = max_magnitude({&d.x, &z, &gamma, &beta, &rv});
      Pair G = vec_in(false, gamma), B = vec_in(false, beta);
      // Training forward, y = x; inference forward, y = z.
      for (int inference = 0; inference < 2; ++inference) {
        INFO((inference ? "inference, y = z" : "training, y = x"));
        Pair X = act_in(g, t, false, d.x), Z = act_in(g, t, false, z), SM = vec(5, false), SR = vec(5, false);
        Pair RM = vec_in(false, std::vector<float>(d.mu.begin(), d.mu.end())), RV = vec_in(false, rv),
             MK = mask_pair(words, false, false);
        for (int side : {kCpu, kGpu})
          XVK_OK(inference ? xvk_batch_norm_forward_inference(context(side), X.dl(side), Z.dl(side), G.dl(side),
                                                              B.dl(side), RM.dl(side), RV.dl(side), &o, Z.dl(side),
                                                              MK.dl(side))
                           : xvk_batch_norm_forward_training(context(side), X.dl(side), Z.dl(side), G.dl(side),
                                                             B.dl(side), &o, X.dl(side), MK.dl(side), nullptr,
                                                             nullptr, SM.dl(side), SR.dl(side)));
        XVK_OK(xvk_context_synchronize(g_gpu));
        Pair &Y = inference ? Z : X;
        const std::vector<float> y = Y.gpu().read(), y_ref = Y.cpu().read();
        const std::vector<double> mean = to_double(inference ? RM.cpu().read() : SM.cpu().read());
        std::vector<double> rstd = to_double(SR.cpu().read());
        if (inference)
          for (size_t ch = 0; ch < 5; ++ch) rstd[ch] = 1.0 / std::sqrt(double(rv[ch]) + double(o.epsilon));
        const Spread spread = spread_of(g, d.x);
        std::vector<double> y_floor = base_floor(y_ref, input_scale);
        raise_floor(y_floor, g, y_mean_term(mean, rstd, &gamma, t, inference ? nullptr : &spread.std));
        expect_close("y", y, y_ref, y_floor, t);
        check_mask("mask", numel, true, MK.gpu().read_words(), MK.cpu().read_words(), y,
                   preactivation(g, d.x, &z, mean, rstd, &gamma, &beta), y_floor, t);
        if (inference) continue;
        // Backward from the CPU's mask and statistics: dx = x, dz = dy.
        const std::vector<uint32_t> mask = MK.cpu().read_words();
        const std::vector<float> y_cpu = y_ref, sm = SM.cpu().read(), sr = SR.cpu().read();
        Pair X2 = act_in(g, t, false, d.x), DY = act_in(g, t, false, dy), SMI = vec_in(false, sm),
             SRI = vec_in(false, sr), MKI = mask_pair(words, false, false), DG = vec(5, false), DB = vec(5, false);
        for (auto &b : MKI.b) b->write_words(mask);
        for (int side : {kCpu, kGpu})
          XVK_OK(xvk_batch_norm_backward(context(side), DY.dl(side), X2.dl(side), MKI.dl(side), nullptr, G.dl(side),
                                         SMI.dl(side), SRI.dl(side), &o, X2.dl(side), DY.dl(side), DG.dl(side),
                                         DB.dl(side)));
        XVK_OK(xvk_context_synchronize(g_gpu));
        const double bwd_scale = max_magnitude({&dy, &d.x, &gamma, &sm, &sr});
        const BackwardFloors bf = backward_floors(g, d.x, dy, &y_cpu, sm, sr, &gamma);
        const std::vector<float> dx_ref = X2.cpu().read();
        std::vector<double> dx_floor = base_floor(dx_ref, bwd_scale);
        raise_floor(dx_floor, g, bf.dx);
        expect_close("dx (in x)", X2.gpu().read(), dx_ref, dx_floor, t);
        expect_close("dz (in dy)", DY.gpu().read(), DY.cpu().read(), std::vector<double>(size_t(numel), 0.0), t);
        const std::vector<float> dg_ref = DG.cpu().read(), db_ref = DB.cpu().read();
        expect_close("dgamma", DG.gpu().read(), dg_ref, channel_floor(dg_ref, bwd_scale, bf.dgamma), DType::f32);
        expect_close("dbeta", DB.gpu().read(), db_ref, channel_floor(db_ref, bwd_scale, bf.dbeta), DType::f32);
      }
    }
}

namespace {

// Raw device memory for the > 2^31-element case.
struct DeviceBlock {
  void *p = nullptr;
  DeviceBlock() = default;
  DeviceBlock(const DeviceBlock &) = delete;
  DeviceBlock &operator=(const DeviceBlock &) = delete;
  ~DeviceBlock() { xvk_memory_free(g_gpu, p); }
  unsigned char *at(size_t byte) const { return static_cast<unsigned char *>(p) + byte; }
};

// false: the device is out of memory (the case is skipped).
bool allocate(DeviceBlock &b, size_t bytes) {
  const xvk_status_t s = xvk_memory_alloc(g_gpu, bytes, &b.p);
  if (s == XVK_ERROR_OUT_OF_MEMORY) return false;
  REQUIRE_MESSAGE(s == XVK_SUCCESS, xvk_last_error_message());
  return true;
}

// [dst, dst + bytes) becomes `pattern` repeated (bytes need not be a multiple).
void fill_repeating(const DeviceBlock &dst, size_t bytes, const Bytes &pattern) {
  Bytes chunk;
  const size_t reps = std::max<size_t>(1, (size_t(64) << 20) / pattern.size());
  chunk.reserve(reps * pattern.size());
  for (size_t r = 0; r < reps; ++r) chunk.insert(chunk.end(), pattern.begin(), pattern.end());
  for (size_t done = 0; done < bytes;) {
    const size_t k = std::min(chunk.size(), bytes - done);
    XVK_OK(xvk_memory_copy(g_gpu, dst.at(done), chunk.data(), k));
    done += k;
  }
  XVK_OK(xvk_context_synchronize(g_gpu));
}

DLTensor raw_tensor(const DeviceBlock &b, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,
                    DLDataType dtype) {
  DLTensor t{};
  t.data = b.p;
  t.device = device_of(g_gpu);
  t.ndim = int32_t(shape.size());
  t.dtype = dtype;
  t.shape = const_cast<int64_t *>(shape.data());
  t.strides = strides.empty() ? nullptr : const_cast<int64_t *>(strides.data());
  return t;
}

template <class T>
Bytes as_bytes(const std::vector<T> &v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("batch_norm: a float16 tensor of more than 2^31 elements") {
  if (kQuick) {
    MESSAGE("skipped under XVK_TEST_QUICK");
    return;
  }
  if (g_self_check && !std::getenv("XVK_TEST_HUGE")) {
    MESSAGE("skipped in the cpu self-check (XVK_TEST_HUGE=1 runs it, with ~17 GiB of host memory)");
    return;
  }
  // (N, 16, 64, 64), N = 2^31 / (16 * 64 * 64) + 1: the last batch starts at
  // element 2^31. The data repeats every P batches (P divides N), so every
  // per-channel sum is N / P times that of a (P, 16, 64, 64) tensor: the CPU
  // backend on that tensor is the reference.
  const int64_t C = 16, H = 64, W = 64, per = C * H * W, N = (int64_t(1) << 31) / per + 1, P = 9;
  REQUIRE(N % P == 0);
  const int64_t numel = N * per, words = numel / 32, per_words = per / 32;
  const size_t bytes = size_t(numel) * 2;
  DeviceBlock x, y, mask, dy, dx;
  for (DeviceBlock *b : {&x, &y, &dy, &dx})
    if (!allocate(*b, bytes)) {
      MESSAGE("skipped: the device cannot allocate the 4 x 4 GiB of this case (XVK_ERROR_OUT_OF_MEMORY)");
      return;
    }
  if (!allocate(mask, size_t(words) * 4)) {
    MESSAGE("skipped: the device cannot allocate the mask (XVK_ERROR_OUT_OF_MEMORY)");
    return;
  }
  const Geometry small_last = geometry(P, C, {H, W}, Mem::last);
  const Data d = make_data(small_last, DType::f16, 0.0, 1.0);  // channel means by the channels-last reading
  const std::vector<float> dys = g_rng.normal(size_t(P * per), 0.0, 1.0, DType::f16);
  const std::vector<float> gamma = g_rng.normal(size_t(C), 1.0, 0.3), beta = g_rng.normal(size_t(C), 0.0, 0.3);
  {
    Bytes xb(size_t(P * per) * 2), dyb(xb.size());
    encode_values(DType::f16, d.x, xb.data());
    encode_values(DType::f16, dys, dyb.data());
    fill_repeating(x, bytes, xb);
    fill_repeating(dy, bytes, dyb);
  }
  const std::vector<int64_t> mask_shape = {words};
  const int64_t samples[] = {0, 1, 10, N / 2, N - 2, N - 1};  // batch N - 1 starts at element 2^31
  const double scale = std::max(max_finite_magnitude(d.x), max_finite_magnitude(gamma));
  xvk_batch_norm_options o = XVK_BATCH_NORM_OPTIONS_INIT;
  o.activation = XVK_ACTIVATION_RELU;
  for (Mem mem : {Mem::last, Mem::first}) {
    const Geometry big = geometry(N, C, {H, W}, mem), small = geometry(P, C, {H, W}, mem);
    INFO("float16 " << big.str());
    DLTensor X = raw_tensor(x, big.shape, big.strides, dl_dtype(DType::f16)),
             Y = raw_tensor(y, big.shape, big.strides, dl_dtype(DType::f16)),
             DY = raw_tensor(dy, big.shape, big.strides, dl_dtype(DType::f16)),
             DX = raw_tensor(dx, big.shape, big.strides, dl_dtype(DType::f16)),
             MK = raw_tensor(mask, mask_shape, {}, DLDataType{kDLUInt, 32, 1});
    fill_repeating(y, bytes, nan_bytes(DType::f16));
    fill_repeating(dx, bytes, nan_bytes(DType::f16));
    fill_repeating(mask, size_t(words) * 4, Bytes(4, 0xA5));
    Pair G = vec_in(false, gamma), B = vec_in(false, beta), SM = vec(C, false), SR = vec(C, false);
    Buf xs(kCpu, small.shape, small.strides, DType::f16, false), ys(kCpu, small.shape, small.strides, DType::f16, false),
        ms(kCpu, {P * per_words}, {}, DType::f32, false, Kind::mask_u32);
    xs.write(d.x);

    // Forward training with ReLU and the mask.
    XVK_OK(xvk_batch_norm_forward_training(g_gpu, &X, nullptr, G.dl(kGpu), B.dl(kGpu), &o, &Y, &MK, nullptr, nullptr,
                                           SM.dl(kGpu), SR.dl(kGpu)));
    XVK_OK(xvk_batch_norm_forward_training(g_cpu, xs.dl(), nullptr, G.dl(kCpu), B.dl(kCpu), &o, ys.dl(), ms.dl(),
                                           nullptr, nullptr, SM.dl(kCpu), SR.dl(kCpu)));
    XVK_OK(xvk_context_synchronize(g_gpu));
    const std::vector<float> sm = SM.cpu().read(), sr = SR.cpu().read(), y_small = ys.read();
    const std::vector<uint32_t> mask_small = ms.read_words();
    const Spread spread = spread_of(small, d.x);
    expect_close("saved_mean", SM.gpu().read(), sm, channel_floor(sm, scale, spread.rms), DType::f32);
    expect_close("saved_rstd", SR.gpu().read(), sr, channel_floor(sr, scale), DType::f32);
    const std::vector<double> mean = to_double(sm), rstd = to_double(sr);
    std::vector<float> y_got, y_ref, x_ref;
    std::vector<uint32_t> m_got, m_ref;
    for (int64_t b : samples) {
      Bytes block(size_t(per) * 2);
      copy_to_host(g_gpu, block.data(), y.at(size_t(b * per) * 2), block.size());
      const std::vector<float> yb = decode_values(DType::f16, block.data(), size_t(per));
      y_got.insert(y_got.end(), yb.begin(), yb.end());
      const size_t r = size_t((b % P) * per);
      y_ref.insert(y_ref.end(), y_small.begin() + long(r), y_small.begin() + long(r + size_t(per)));
      x_ref.insert(x_ref.end(), d.x.begin() + long(r), d.x.begin() + long(r + size_t(per)));
      std::vector<uint32_t> wb(static_cast<size_t>(per_words));
      copy_to_host(g_gpu, wb.data(), mask.at(size_t(b * per_words) * 4), wb.size() * 4);
      m_got.insert(m_got.end(), wb.begin(), wb.end());
      const size_t rw = size_t((b % P) * per_words);
      m_ref.insert(m_ref.end(), mask_small.begin() + long(rw), mask_small.begin() + long(rw + size_t(per_words)));
    }
    std::vector<double> y_floor = base_floor(y_ref, scale);
    raise_floor(y_floor, big, y_mean_term(mean, rstd, &gamma, DType::f16, &spread.std));  // sampled blocks start at batch starts
    expect_close("y, sampled batches", y_got, y_ref, y_floor, DType::f16);
    check_mask("mask, sampled batches", int64_t(y_got.size()), false, m_got, m_ref, y_got,
               preactivation(big, x_ref, nullptr, mean, rstd, &gamma, &beta), y_floor, DType::f16);

    // Backward from the CPU's mask (repeated) and statistics.
    fill_repeating(mask, size_t(words) * 4, as_bytes(mask_small));
    Pair SMI = vec_in(false, sm), SRI = vec_in(false, sr), DG = vec(C, false), DB = vec(C, false);
    Buf dys_t(kCpu, small.shape, small.strides, DType::f16, false), dxs(kCpu, small.shape, small.strides, DType::f16, false);
    dys_t.write(dys);
    XVK_OK(xvk_batch_norm_backward(g_gpu, &DY, &X, &MK, nullptr, G.dl(kGpu), SMI.dl(kGpu), SRI.dl(kGpu), &o, &DX,
                                   nullptr, DG.dl(kGpu), DB.dl(kGpu)));
    XVK_OK(xvk_batch_norm_backward(g_cpu, dys_t.dl(), xs.dl(), ms.dl(), nullptr, G.dl(kCpu), SMI.dl(kCpu),
                                   SRI.dl(kCpu), &o, dxs.dl(), nullptr, DG.dl(kCpu), DB.dl(kCpu)));
    XVK_OK(xvk_context_synchronize(g_gpu));
    const std::vector<float> dx_small = dxs.read();
    std::vector<float> dx_got, dx_ref;
    for (int64_t b : samples) {
      Bytes block(size_t(per) * 2);
      copy_to_host(g_gpu, block.data(), dx.at(size_t(b * per) * 2), block.size());
      const std::vector<float> db = decode_values(DType::f16, block.data(), size_t(per));
      dx_got.insert(dx_got.end(), db.begin(), db.end());
      const size_t r = size_t((b % P) * per);
      dx_ref.insert(dx_ref.end(), dx_small.begin() + long(r), dx_small.begin() + long(r + size_t(per)));
    }
    // Floors as in run_case, from the small tensor (its sums count N / P times).
    const BackwardFloors bf = backward_floors(small, d.x, dys, &y_small, sm, sr, &gamma, double(N / P));
    const double bwd_scale = std::max(scale, max_finite_magnitude(dys));
    std::vector<double> dx_floor = base_floor(dx_ref, bwd_scale);
    raise_floor(dx_floor, big, bf.dx);
    expect_close("dx, sampled batches", dx_got, dx_ref, dx_floor, DType::f16);
    std::vector<float> dg_ref = DG.cpu().read(), db_ref = DB.cpu().read();
    for (size_t ch = 0; ch < size_t(C); ++ch) {
      dg_ref[ch] = float(double(dg_ref[ch]) * double(N / P));
      db_ref[ch] = float(double(db_ref[ch]) * double(N / P));
    }
    expect_close("dgamma", DG.gpu().read(), dg_ref, channel_floor(dg_ref, bwd_scale, bf.dgamma), DType::f32);
    expect_close("dbeta", DB.gpu().read(), db_ref, channel_floor(db_ref, bwd_scale, bf.dbeta), DType::f32);
  }
}

int main(int argc, char **argv) {
  const char *want = std::getenv("XVK_TEST_GPU_BACKEND");
  std::string reasons;
  xvk_backend_t chosen = XVK_BACKEND_CPU;
  // Debugging the suite itself on a machine without a GPU: XVK_TEST_GPU_BACKEND=cpu
  // compares the CPU backend with itself (so it proves nothing about a GPU).
  g_self_check = want && std::strcmp(want, "cpu") == 0;
  for (xvk_backend_t b : {XVK_BACKEND_CUDA, XVK_BACKEND_HIP}) {
    if (want && std::strcmp(want, xvk_backend_name(b)) != 0) continue;
    int available = 0;
    const char *reason = "";
    xvk_backend_query(b, &available, nullptr, &reason);
    if (available) {
      chosen = b;
      break;
    }
    reasons += std::string(reasons.empty() ? "" : "; ") + xvk_backend_name(b) + ": " + reason;
  }
  if (chosen == XVK_BACKEND_CPU && !g_self_check) {
    std::printf("SKIPPED test_gpu_batch_norm: no usable GPU backend (%s)\n", reasons.c_str());
    return 77;
  }
  std::printf("test_gpu_batch_norm on the %s backend%s\n", xvk_backend_name(chosen), kQuick ? " (quick)" : "");
  std::unique_ptr<Context> gpu, cpu;
  try {
    gpu = std::make_unique<Context>(chosen);
    cpu = std::make_unique<Context>(XVK_BACKEND_CPU);
  } catch (const std::runtime_error &e) {
    std::printf("context creation failed: %s\n", e.what());
    return 1;
  }
  g_gpu = *gpu;
  g_cpu = *cpu;
  doctest::Context context(argc, argv);
  return context.run();
}
