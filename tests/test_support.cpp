#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "core/half.hpp"

namespace xvk_test {

// ---------------------------------------------------------------------------
// dtypes
// ---------------------------------------------------------------------------

const char *dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f16: return DLDataType{kDLFloat, 16, 1};
    case DType::bf16: return DLDataType{kDLBfloat, 16, 1};
    default: return DLDataType{kDLFloat, 32, 1};
  }
}

size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::f16: return xvk::to_float(xvk::to_half(value));
    case DType::bf16: return xvk::to_float(xvk::to_bfloat16(value));
    default: return value;
  }
}

namespace {

void encode(DType dtype, float value, unsigned char *dst) {
  if (dtype == DType::f32) {
    std::memcpy(dst, &value, 4);
  } else {
    const uint16_t bits = dtype == DType::f16 ? xvk::to_half(value).bits : xvk::to_bfloat16(value).bits;
    std::memcpy(dst, &bits, 2);
  }
}

float decode(DType dtype, const unsigned char *src) {
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, src, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, src, 2);
  return dtype == DType::f16 ? xvk::to_float(xvk::half_t{bits}) : xvk::to_float(xvk::bfloat16_t{bits});
}

[[noreturn]] void throw_xvk(const char *what, xvk_status_t status) {
  throw std::runtime_error(std::string(what) + " failed: " + xvk_status_string(status) + ": " +
                           xvk_last_error_message());
}

}  // namespace

std::vector<unsigned char> nan_bytes(DType dtype) {
  std::vector<unsigned char> out(dtype_size(dtype));
  encode(dtype, std::numeric_limits<float>::quiet_NaN(), out.data());
  return out;
}

// ---------------------------------------------------------------------------
// Tolerances and comparison (see the header for the reasoning)
// ---------------------------------------------------------------------------

Tolerance tolerance(DType output_dtype) {
  const double acc = std::ldexp(1.0, -20);
  switch (output_dtype) {
    case DType::f16: return {std::ldexp(1.0, -10), acc, std::ldexp(1.0, -24)};
    case DType::bf16: return {std::ldexp(1.0, -7), acc, std::ldexp(1.0, -126)};
    default: return {std::ldexp(1.0, -21), acc, std::ldexp(1.0, -126)};
  }
}

std::string Comparison::message() const {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                "%s: %zu of %zu elements differ; worst at [%zu]: got %.9g, reference %.17g, |error| %.3g, "
                "allowed %.3g",
                what.c_str(), bad, checked, index, got, ref, std::fabs(got - ref), allowed);
  return ok ? what + ": ok (" + std::to_string(checked) + " elements)" : std::string(buffer);
}

Comparison compare(const std::string &what, const std::vector<float> &got, const std::vector<double> &ref,
                   const std::vector<double> &scale, Tolerance tol) {
  Comparison c;
  c.what = what;
  if (got.size() != ref.size() || (!scale.empty() && scale.size() != ref.size())) {
    c.ok = false;
    c.bad = 1;
    c.what += " (size mismatch: got " + std::to_string(got.size()) + ", reference " + std::to_string(ref.size()) + ")";
    return c;
  }
  double worst = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    ++c.checked;
    const double g = got[i], r = ref[i];
    const double allowed = tol.out * std::fabs(r) + tol.acc * (scale.empty() ? 0.0 : scale[i]) + tol.tiny;
    double badness = 0;  // > 1: fails
    if (std::isnan(r)) {
      badness = std::isnan(g) ? 0 : std::numeric_limits<double>::infinity();
    } else if (std::isinf(r)) {
      badness = g == r ? 0 : std::numeric_limits<double>::infinity();
    } else if (!std::isfinite(g)) {
      badness = std::numeric_limits<double>::infinity();
    } else {
      badness = std::fabs(g - r) / allowed;
    }
    if (badness > 1) {
      ++c.bad;
      c.ok = false;
    }
    if (badness > worst) {
      worst = badness;
      c.index = i;
      c.got = g;
      c.ref = r;
      c.allowed = allowed;
    }
  }
  return c;
}

Tolerance agreement_tolerance(DType output_dtype) {
  const double agree = output_dtype == DType::f16 ? 2e-3 : output_dtype == DType::bf16 ? 1.6e-2 : 2e-5;
  return {agree, agree, 0.0};
}

std::vector<double> agreement_floor(const std::vector<double> &reference, double input_scale,
                                    const std::vector<double> &row_floor) {
  if (!row_floor.empty() && reference.size() % row_floor.size() != 0)
    throw std::invalid_argument("agreement_floor: " + std::to_string(row_floor.size()) + " row floors for " +
                                std::to_string(reference.size()) + " elements");
  const double base = std::max(0.05 * max_finite_magnitude(reference), 0.01 * input_scale);
  std::vector<double> floor(reference.size(), base);
  if (!row_floor.empty()) {
    const size_t row_length = reference.size() / row_floor.size();
    for (size_t i = 0; i < floor.size(); ++i) floor[i] = std::max(base, row_floor[i / row_length]);
  }
  return floor;
}

std::vector<double> norm_dx_row_floor(const std::vector<float> &dy, const std::vector<float> &rstd,
                                      const std::vector<float> &gamma, bool zero_centered) {
  if (rstd.empty() || dy.size() % rstd.size() != 0)
    throw std::invalid_argument("norm_dx_row_floor: " + std::to_string(rstd.size()) + " rows for " +
                                std::to_string(dy.size()) + " elements");
  double gmax = 1;
  for (float g : gamma) gmax = std::max(gmax, double(std::fabs(g)) + (zero_centered ? 1.0 : 0.0));
  const size_t cols = dy.size() / rstd.size();
  std::vector<double> floor(rstd.size());
  for (size_t r = 0; r < rstd.size(); ++r) {
    double dmax = 0;
    for (size_t c = 0; c < cols; ++c) dmax = std::max(dmax, double(std::fabs(dy[r * cols + c])));
    floor[r] = std::fabs(double(rstd[r])) * dmax * gmax;
  }
  return floor;
}

// ---------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------

Context::Context(xvk_backend_t backend, int device_id) {
  const xvk_status_t s = xvk_context_create(backend, device_id, &ctx_);
  if (s != XVK_SUCCESS) throw_xvk("xvk_context_create", s);
}

Context::~Context() { xvk_context_destroy(ctx_); }

DLDevice device_of(const xvk_context *ctx) {
  xvk_backend_t backend = XVK_BACKEND_CPU;
  int device_id = 0;
  const xvk_status_t s = xvk_context_get_device(ctx, &backend, &device_id);
  if (s != XVK_SUCCESS) throw_xvk("xvk_context_get_device", s);
  const DLDeviceType type = backend == XVK_BACKEND_CUDA ? kDLCUDA : backend == XVK_BACKEND_HIP ? kDLROCM : kDLCPU;
  return DLDevice{type, device_id};
}

void copy_to_device(xvk_context *ctx, void *dst, const void *src, size_t bytes) {
  xvk_status_t s = xvk_memory_copy(ctx, dst, src, bytes);
  if (s != XVK_SUCCESS) throw_xvk("xvk_memory_copy", s);
  s = xvk_context_synchronize(ctx);
  if (s != XVK_SUCCESS) throw_xvk("xvk_context_synchronize", s);
}

void copy_to_host(xvk_context *ctx, void *dst, const void *src, size_t bytes) {
  copy_to_device(ctx, dst, src, bytes);  // xvk_memory_copy goes either way
}

// ---------------------------------------------------------------------------
// TensorDesc
// ---------------------------------------------------------------------------

TensorDesc::TensorDesc(const DLTensor &t) : t_(t), present_(true) {
  if (t.ndim > 0 && t.shape) shape_.assign(t.shape, t.shape + t.ndim);
  if (t.ndim > 0 && t.strides) strides_.assign(t.strides, t.strides + t.ndim);
  has_strides_ = t.strides != nullptr;
  resync();
}

TensorDesc::TensorDesc(const TensorDesc &other)
    : t_(other.t_), shape_(other.shape_), strides_(other.strides_), has_strides_(other.has_strides_),
      present_(other.present_) {
  // Keep pointing at our own arrays where the original pointed at its own.
  if (other.t_.shape == other.shape_.data()) t_.shape = shape_.data();
  if (other.t_.strides == other.strides_.data() && other.has_strides_) t_.strides = strides_.data();
}

TensorDesc &TensorDesc::operator=(const TensorDesc &other) {
  if (this != &other) {
    TensorDesc copy(other);
    t_ = copy.t_;
    shape_ = copy.shape_;
    strides_ = copy.strides_;
    has_strides_ = copy.has_strides_;
    present_ = copy.present_;
    if (copy.t_.shape == copy.shape_.data()) t_.shape = shape_.data();
    if (copy.has_strides_ && copy.t_.strides == copy.strides_.data()) t_.strides = strides_.data();
  }
  return *this;
}

void TensorDesc::set_shape(std::vector<int64_t> shape) {
  shape_ = std::move(shape);
  t_.ndim = int(shape_.size());
  resync();
}

void TensorDesc::set_strides(std::vector<int64_t> strides) {
  strides_ = std::move(strides);
  has_strides_ = true;
  resync();
}

void TensorDesc::clear_strides() {
  has_strides_ = false;
  strides_.clear();
  resync();
}

void TensorDesc::resync() {
  t_.shape = shape_.empty() ? nullptr : shape_.data();
  t_.strides = has_strides_ && !strides_.empty() ? strides_.data() : nullptr;
}

// ---------------------------------------------------------------------------
// Tensor
// ---------------------------------------------------------------------------

std::vector<int64_t> padded_row_strides(const std::vector<int64_t> &shape, int inner_ndim, int64_t row_pad) {
  const int ndim = int(shape.size()), lead = ndim - std::min(std::max(inner_ndim, 0), ndim);
  std::vector<int64_t> strides(size_t(ndim), 1);
  int64_t step = 1;
  for (int k = ndim - 1; k >= lead; --k) strides[size_t(k)] = step, step *= shape[size_t(k)];
  step += row_pad;  // the distance between rows
  for (int k = lead - 1; k >= 0; --k) strides[size_t(k)] = step, step *= shape[size_t(k)];
  return strides;
}

Tensor::Tensor(xvk_context *ctx, std::vector<int64_t> shape, DType dtype, std::vector<int64_t> strides,
               uint64_t pad_bytes, uint64_t tail_bytes)
    : ctx_(ctx), dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {
  const int ndim = int(shape_.size());
  const bool contiguous = strides_.empty();  // then the DLTensor says so with strides == NULL
  if (contiguous) {
    strides_.assign(size_t(ndim), 1);
    for (int k = ndim - 2; k >= 0; --k) strides_[size_t(k)] = strides_[size_t(k) + 1] * shape_[size_t(k) + 1];
  }
  if (int(strides_.size()) != ndim) throw std::invalid_argument("Tensor: strides and shape differ in length");
  numel_ = product(shape_);
  int64_t lo = 0, hi = 0;  // element offsets (relative to the logical origin) that the tensor touches
  if (numel_ > 0)
    for (int k = 0; k < ndim; ++k) {
      const int64_t extent = (shape_[size_t(k)] - 1) * strides_[size_t(k)];
      (extent < 0 ? lo : hi) += extent;
    }
  const size_t elem = dtype_size(dtype_);
  bytes_ = size_t(pad_bytes) + size_t(hi - lo + 1) * elem + size_t(tail_bytes);
  bytes_ = (bytes_ + elem - 1) / elem * elem;
  const xvk_status_t s = xvk_memory_alloc(ctx_, bytes_, &base_);
  if (s != XVK_SUCCESS) throw_xvk("xvk_memory_alloc", s);
  t_.data = base_;
  t_.device = device_of(ctx_);
  t_.ndim = ndim;
  t_.dtype = dl_dtype(dtype_);
  t_.shape = shape_.empty() ? nullptr : shape_.data();
  t_.strides = contiguous || strides_.empty() ? nullptr : strides_.data();
  t_.byte_offset = pad_bytes + uint64_t(-lo) * elem;
  poison();
}

Tensor::~Tensor() { xvk_memory_free(ctx_, base_); }

size_t Tensor::byte_of(int64_t i) const {
  int64_t offset = 0;
  for (int k = int(shape_.size()) - 1; k >= 0; --k) {
    const int64_t n = shape_[size_t(k)];
    offset += (i % n) * strides_[size_t(k)];
    i /= n;
  }
  return size_t(int64_t(t_.byte_offset) + offset * int64_t(dtype_size(dtype_)));
}

Bytes Tensor::snapshot() const {
  Bytes out(bytes_);
  copy_to_host(ctx_, out.data(), base_, bytes_);
  return out;
}

void Tensor::restore(const Bytes &bytes) {
  if (bytes.size() != bytes_) throw std::invalid_argument("Tensor::restore: wrong size");
  copy_to_device(ctx_, base_, bytes.data(), bytes_);
}

void Tensor::fill(const std::vector<float> &values) {
  if (int64_t(values.size()) != numel_)
    throw std::invalid_argument("Tensor::fill: " + std::to_string(values.size()) + " values for " +
                                std::to_string(numel_) + " elements");
  Bytes bytes = snapshot();
  for (int64_t i = 0; i < numel_; ++i) encode(dtype_, values[size_t(i)], bytes.data() + byte_of(i));
  restore(bytes);
}

std::vector<float> Tensor::read() const { return read(0, numel_); }

std::vector<float> Tensor::read(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first > numel_ - count)
    throw std::invalid_argument("Tensor::read: elements [" + std::to_string(first) + ", +" + std::to_string(count) +
                                ") of " + std::to_string(numel_));
  std::vector<float> out(static_cast<size_t>(count));
  if (count == 0) return out;
  size_t lo = bytes_, hi = 0;  // the bytes the elements span
  for (int64_t i = first; i < first + count; ++i) {
    lo = std::min(lo, byte_of(i));
    hi = std::max(hi, byte_of(i) + dtype_size(dtype_));
  }
  Bytes bytes(hi - lo);
  copy_to_host(ctx_, bytes.data(), static_cast<const unsigned char *>(base_) + lo, bytes.size());
  for (int64_t i = first; i < first + count; ++i)
    out[size_t(i - first)] = decode(dtype_, bytes.data() + (byte_of(i) - lo));
  return out;
}

void Tensor::poison() {
  const std::vector<unsigned char> nan = nan_bytes(dtype_);
  const size_t elem = nan.size(), phase = size_t(t_.byte_offset % elem);
  Bytes bytes(bytes_);
  for (size_t k = 0; k < std::min(elem, bytes_); ++k) bytes[k] = nan[(k + elem - phase) % elem];
  // Repeat the first element's bytes, doubling (the buffer can be gigabytes).
  for (size_t done = elem; done < bytes_; done *= 2)
    std::memcpy(bytes.data() + done, bytes.data(), std::min(done, bytes_ - done));
  restore(bytes);
}

bool Tensor::gaps_unchanged(const Bytes &before) const {
  if (before.size() != bytes_) return false;
  const Bytes now = snapshot();
  std::vector<bool> element(bytes_, false);
  const size_t elem = dtype_size(dtype_);
  for (int64_t i = 0; i < numel_; ++i)
    for (size_t b = 0; b < elem; ++b) element[byte_of(i) + b] = true;
  for (size_t k = 0; k < bytes_; ++k)
    if (!element[k] && now[k] != before[k]) return false;
  return true;
}

// ---------------------------------------------------------------------------
// Random data and shapes
// ---------------------------------------------------------------------------

std::vector<float> Rng::normal(size_t n, double mean, double std, DType dtype) {
  std::normal_distribution<double> dist(mean, std);
  std::vector<float> out(n);
  for (float &v : out) {
    do v = round_to(dtype, float(dist(engine_)));
    while (v == 0.0f);
  }
  return out;
}

std::vector<float> Rng::uniform(size_t n, double lo, double hi, DType dtype) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> out(n);
  for (float &v : out) {
    do v = round_to(dtype, float(dist(engine_)));
    while (v == 0.0f);
  }
  return out;
}

int64_t Rng::integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }

std::vector<int64_t> interesting_cols(int64_t max_cols) {
  static const int64_t all[] = {1,    2,    3,    5,    7,    8,    13,   17,    31,    32,    33,   61,
                                64,   97,   127,  128,  255,  256,  257,  509,   512,   761,   1000, 1021,
                                1024, 2039, 2048, 4093, 4096, 8191, 8192, 16381, 16384, 32749, 32768};
  std::vector<int64_t> out;
  for (int64_t c : all)
    if (c <= max_cols) out.push_back(c);
  return out;
}

std::vector<int64_t> interesting_rows() { return {1, 2, 3, 7, 13}; }

int64_t random_cols(Rng &rng, int64_t max_cols) {
  static const int64_t primes[] = {2, 3, 5, 7, 11, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749};
  for (;;) {
    int64_t c = 1;
    switch (rng.integer(0, 3)) {
      case 0: c = primes[rng.integer(0, int64_t(sizeof primes / sizeof primes[0]) - 1)]; break;
      case 1: c = int64_t(1) << rng.integer(0, 15); break;
      case 2: c = rng.integer(1, 4096) | 1; break;  // odd: not a multiple of 8
      default: c = 8 * rng.integer(1, 512) + rng.integer(1, 7); break;  // off a multiple of 8
    }
    if (c <= max_cols) return c;
  }
}

int64_t product(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t k = 0; k < dims.size(); ++k) s += (k ? ", " : "") + std::to_string(dims[k]);
  return s + "]";
}

}  // namespace xvk_test
