// Helpers shared by the xvk test suites (API validation, CPU numerics, and
// the GPU suites that compare a GPU backend with the CPU backend).
//
// Everything here works on any backend: tensors live on an xvk_context and
// are only touched through xvk_memory_copy + xvk_context_synchronize, so the
// same code fills, reads, poisons and snapshots CPU and GPU memory.
// Nothing here depends on doctest; suites turn results into assertions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "xvk/xvk.h"

namespace xvk_test {

// ---------------------------------------------------------------------------
// dtypes
// ---------------------------------------------------------------------------

enum class DType { f32, f16, bf16 };
inline constexpr DType kAllDtypes[] = {DType::f32, DType::f16, DType::bf16};

const char *dtype_name(DType dtype);  // "f32", "f16", "bf16"
DLDataType dl_dtype(DType dtype);
size_t dtype_size(DType dtype);
// The value a float becomes when stored as `dtype` (round to nearest even).
float round_to(DType dtype, float value);
// A bit pattern of `dtype` that is NaN, as little-endian bytes (size dtype_size).
std::vector<unsigned char> nan_bytes(DType dtype);

// ---------------------------------------------------------------------------
// Tolerances: stated once, here, for every suite.
//
// A result r is accepted against the float64 reference `ref` when
//
//     |r - ref| <= out * |ref| + acc * scale + tiny
//
// out   rounding of the stored output. The float64 reference rounded to the
//       output dtype is within half an ulp; a backend that computes in fp32
//       and then rounds may land on the other side of a rounding boundary,
//       so we allow one ulp of the output dtype relative to |ref|:
//         f32  2^-21 (a few fp32 ulps: also covers fp32 exp/log/rsqrt, which
//                     are accurate to 1-2 ulp on GPUs)
//         f16  2^-10 (one fp16 ulp, 11-bit significand)
//         bf16 2^-7  (one bf16 ulp, 8-bit significand)
// acc   error of the fp32 arithmetic every backend does, whatever the storage
//       dtype (the inputs are exact: the reference reads the stored values).
//       It is relative to `scale`, the magnitude of the terms that the result
//       is computed from (which the oracle supplies per element), not to the
//       result: e.g. LayerNorm of rows with mean 1e4 and std 1e-2 subtracts
//       numbers near 1e4 to get values near 1e-2, so an fp32 mean that is off
//       by one ulp of 1e4 shifts every output by ulp(1e4) * rstd. 2^-20 is
//       16 half-ulps of fp32: enough for tree reductions of up to 2^15 terms
//       (15 levels), far too little for a method that loses the variance to
//       cancellation (sum of squares minus square of sums is wrong by O(1)
//       there, and test_cpu_numerics.cpp checks that this bound rejects it).
// tiny  absolute floor near zero: f32 and bf16 2^-126 (the smallest normal:
//       GPU kernels may flush fp32 subnormals to zero), f16 2^-24 (one
//       subnormal step of fp16; fp16 stores subnormals from fp32 exactly).
// NaN must match NaN and an infinity must match exactly.
// ---------------------------------------------------------------------------

struct Tolerance {
  double out;
  double acc;
  double tiny;
};
Tolerance tolerance(DType output_dtype);

// Result of comparing a tensor with its reference.
struct Comparison {
  bool ok = true;
  size_t checked = 0, bad = 0;
  // The worst element (largest error / allowed), or the first non-matching
  // NaN/inf/non-finite element.
  size_t index = 0;
  double got = 0, ref = 0, allowed = 0;
  std::string what;
  std::string message() const;  // "y: 3 of 4096 elements differ; worst [17] got ... ref ... allowed ..."
  explicit operator bool() const { return ok; }
};

// scale may be empty (all zeros) or have one entry per element.
Comparison compare(const std::string &what, const std::vector<float> &got, const std::vector<double> &ref,
                   const std::vector<double> &scale, Tolerance tol);

// ---------------------------------------------------------------------------
// Agreement of two backends: the GPU suites compare a GPU backend with the
// CPU backend, not with the float64 oracle. Neither side is exact: both
// compute in float32 (the GPU with fast intrinsics such as __expf, __logf and
// rsqrtf, and in another order) and both round to the output dtype. The GPU
// result g is accepted against the CPU result c when
//
//     |g - c| <= agree * (|c| + floor)
//
// agree  about two ulps of the output dtype, one for each side's rounding:
//          f16  2e-3   (~2^-9: two fp16 ulps)
//          bf16 1.6e-2 (~2^-6: two bf16 ulps)
//          f32  2e-5   (~2^-15.6, far more than two fp32 ulps: __expf is
//                       off by up to 2 + 1.173|x| ulps, ~25 ulps at the
//                       x - max = -20 that softmax rows reach, and GPU and
//                       CPU round the sums of a row in different orders)
// floor  float32 arithmetic leaves an error proportional to the magnitude of
//        the terms an element is computed from, which after cancellation can
//        be far larger than the element (a softmax gradient near zero, a
//        normalized value near the mean). There is no oracle to supply those
//        magnitudes per element, so agreement_floor() estimates them for one
//        output as the largest of
//          - 5% of the largest finite |c| of that output,
//          - 1% of the largest finite |value| among the call's inputs
//            (statistics such as a mean can be small while their error
//            follows the data), and
//          - an optional per-row magnitude that the suite derives from the
//            operator: e.g. the norms' dx is rstd * (dy * gamma - ...), so its
//            error follows rstd * max|dy| * max|gamma| over its row.
//        With the floor there is no separate `tiny`: it is far above the
//        subnormals that a GPU may flush to zero.
// NaN must match NaN, an infinity must match exactly, and anything else
// non-finite fails. These are compare()'s bound and rules with
// out = acc = agree, tiny = 0 and scale = floor, so suites call
//     compare(what, gpu, cpu, agreement_floor(cpu, ...), agreement_tolerance(dtype)).
// These are the values under which the GPU suite passed on an H100: do not
// loosen them to make a GPU pass.
// ---------------------------------------------------------------------------

Tolerance agreement_tolerance(DType output_dtype);
// Largest finite |v| of `values` (0 if none is finite).
template <typename T>
double max_finite_magnitude(const std::vector<T> &values) {
  double m = 0;
  for (T v : values)
    if (std::isfinite(v)) m = std::max(m, std::fabs(double(v)));
  return m;
}
// The floor above, one entry per element of `reference` (the CPU result).
// row_floor: empty, or one entry per row of reference.size() / row_floor.size()
// consecutive elements.
std::vector<double> agreement_floor(const std::vector<double> &reference, double input_scale,
                                    const std::vector<double> &row_floor = {});

// The row floor of the norms' dx (LayerNorm and RMSNorm backward), which is
// rstd * (dy * g - c1 - xhat * c2): its error follows rstd * max|dy| * max|g|
// over its row, g being gamma (+ 1 when zero-centered; at least 1). dy holds
// rows x (dy.size() / rows) values, rstd one per row.
std::vector<double> norm_dx_row_floor(const std::vector<float> &dy, const std::vector<float> &rstd,
                                      const std::vector<float> &gamma, bool zero_centered);

// ---------------------------------------------------------------------------
// Contexts and tensors
// ---------------------------------------------------------------------------

// Owns an xvk_context; throws std::runtime_error (with xvk's message) if it
// cannot be created.
class Context {
 public:
  explicit Context(xvk_backend_t backend = XVK_BACKEND_CPU, int device_id = 0);
  ~Context();
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;
  xvk_context *get() const { return ctx_; }
  operator xvk_context *() const { return ctx_; }

 private:
  xvk_context *ctx_ = nullptr;
};

// The DLPack device that tensors of this context carry.
DLDevice device_of(const xvk_context *ctx);

using Bytes = std::vector<unsigned char>;

// A DLTensor that owns its shape and strides arrays but not its memory:
// a copy of an existing tensor's description that a test can change freely
// (set ndim to garbage, point shape at NULL, move byte_offset...).
class TensorDesc {
 public:
  TensorDesc() = default;  // "absent": get() returns NULL
  explicit TensorDesc(const DLTensor &t);
  TensorDesc(const TensorDesc &other);
  TensorDesc &operator=(const TensorDesc &other);

  DLTensor *get() { return present_ ? &t_ : nullptr; }
  const DLTensor *get() const { return present_ ? &t_ : nullptr; }
  DLTensor &t() { return t_; }
  bool present() const { return present_; }
  void set_present(bool present) { present_ = present; }

  void set_shape(std::vector<int64_t> shape);        // also sets ndim
  void set_strides(std::vector<int64_t> strides);    // must match ndim
  void clear_strides();                              // strides = NULL
  std::vector<int64_t> &shape() { return shape_; }   // call resync() after editing
  std::vector<int64_t> &strides() { return strides_; }
  void resync();  // points t().shape/strides back at the owned arrays

 private:
  DLTensor t_{};
  std::vector<int64_t> shape_, strides_;
  bool has_strides_ = false, present_ = false;
};

// Strides, in elements, of a tensor whose trailing `inner_ndim` dimensions
// are contiguous and whose rows (the leading dimensions collapsed onto one)
// lie `row_pad` elements further apart than that: the padded rows of a
// row-wise operator. row_pad 0 gives contiguous strides.
std::vector<int64_t> padded_row_strides(const std::vector<int64_t> &shape, int inner_ndim, int64_t row_pad);

// Memory on a context's device holding one tensor of the given shape,
// dtype, strides (empty: contiguous, and the DLTensor's strides are NULL;
// given: the DLTensor carries them, they may be negative or leave gaps),
// `pad_bytes` of extra room before its lowest element (so byte_offset != 0)
// and `tail_bytes` after its highest one (a guard that catches overruns).
// The whole allocation, gaps included, can be poisoned and snapshotted.
class Tensor {
 public:
  Tensor(xvk_context *ctx, std::vector<int64_t> shape, DType dtype, std::vector<int64_t> strides = {},
         uint64_t pad_bytes = 0, uint64_t tail_bytes = 0);
  ~Tensor();
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;

  DLTensor *dl() { return &t_; }
  const DLTensor *dl() const { return &t_; }
  // A modifiable copy of the description (same memory).
  TensorDesc desc() const { return TensorDesc(t_); }

  xvk_context *context() const { return ctx_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  const std::vector<int64_t> &strides() const { return strides_; }  // in elements, never empty
  int64_t numel() const { return numel_; }
  size_t bytes() const { return bytes_; }  // size of the allocation
  void *allocation() const { return base_; }
  // Byte offset, from the allocation's start, of logical element i (row-major order).
  size_t byte_of(int64_t i) const;

  // Logical elements in row-major order, as floats (rounded to the dtype on
  // the way in; values already representable are stored exactly).
  void fill(const std::vector<float> &values);
  std::vector<float> read() const;
  // Logical elements [first, first + count) only, copying just the bytes
  // they span: for tensors too large to read whole.
  std::vector<float> read(int64_t first, int64_t count) const;
  // Every element slot of the allocation (gaps and padding too) becomes NaN.
  void poison();
  // Raw bytes of the whole allocation.
  Bytes snapshot() const;
  void restore(const Bytes &bytes);
  // Whether the bytes that belong to no logical element (row gaps, padding)
  // are as in `before`.
  bool gaps_unchanged(const Bytes &before) const;

 private:
  xvk_context *ctx_;
  DType dtype_;
  std::vector<int64_t> shape_, strides_;
  int64_t numel_ = 0;
  size_t bytes_ = 0;
  void *base_ = nullptr;
  DLTensor t_{};
};

// Copies between a tensor's device and host, synchronizing; throw on error.
void copy_to_device(xvk_context *ctx, void *dst, const void *src, size_t bytes);
void copy_to_host(xvk_context *ctx, void *dst, const void *src, size_t bytes);

// ---------------------------------------------------------------------------
// Random data and shapes
// ---------------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // n values of N(mean, std), rounded to `dtype`; never exactly zero (a zero
  // is redrawn), so "all zeros" can never hide an unwritten output.
  std::vector<float> normal(size_t n, double mean, double std, DType dtype = DType::f32);
  // n values uniform in [lo, hi), rounded to `dtype`, never zero.
  std::vector<float> uniform(size_t n, double lo, double hi, DType dtype = DType::f32);
  int64_t integer(int64_t lo, int64_t hi);  // inclusive
  std::mt19937_64 &engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

// Column counts every operator is tried on: 1, small primes, sizes that are
// not multiples of 8 or of a warp, powers of two up to max_cols (32768 by
// default: the largest row the GPU kernels keep on chip), and primes just
// below powers of two.
std::vector<int64_t> interesting_cols(int64_t max_cols = 32768);
// Row counts: 1 and a few primes.
std::vector<int64_t> interesting_rows();
// A random column count drawn from the categories above (up to max_cols).
int64_t random_cols(Rng &rng, int64_t max_cols = 32768);

int64_t product(const std::vector<int64_t> &dims);
std::string shape_string(const std::vector<int64_t> &dims);

}  // namespace xvk_test
