#include "core/tensor.hpp"

#include <string>

namespace xvk {
namespace {

// A DLTensor with more dimensions than this is taken for garbage.
constexpr int kMaxNdim = 64;

const char *device_type_name(int type) {
  switch (type) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    default: return "another device type";
  }
}

std::string shape_string(const DLTensor *t) {
  std::string s = "[";
  for (int k = 0; k < t->ndim; ++k) s += (k ? ", " : "") + std::to_string(t->shape[k]);
  return s + "]";
}

std::string dtype_string(DLDataType d) {
  const char *code = d.code == kDLFloat ? "float" : d.code == kDLBfloat ? "bfloat" : d.code == kDLInt ? "int"
                     : d.code == kDLUInt ? "uint" : "code";
  std::string s = code + std::to_string(d.bits);
  if (d.lanes != 1) s += "x" + std::to_string(d.lanes);
  return s;
}

int32_t dtype_id(DLDataType d) {
  if (d.lanes != 1) return -1;
  if (d.code == kDLFloat && d.bits == 32) return XVK_DTYPE_F32;
  if (d.code == kDLFloat && d.bits == 16) return XVK_DTYPE_F16;
  if (d.code == kDLBfloat && d.bits == 16) return XVK_DTYPE_BF16;
  if ((d.code == kDLUInt || d.code == kDLInt) && d.bits == 32) return kMaskWordDtype;
  return -1;
}

std::string allowed_string(unsigned allowed) {
  std::string s;
  for (int32_t id = XVK_DTYPE_F32; id <= kMaskWordDtype; ++id)
    if (allowed & (1u << id)) s += std::string(s.empty() ? "" : ", ") + dtype_name(id);
  return s;
}

}  // namespace

View check_common(const xvk_context &ctx, const char *name, const DLTensor *t, unsigned allowed) {
  if (!t) fail(XVK_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
  if (t->ndim < 0 || t->ndim > kMaxNdim)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has ndim %d; expected 0 to %d", name, t->ndim, kMaxNdim);
  if (t->ndim > 0 && !t->shape) fail(XVK_ERROR_INVALID_ARGUMENT, "%s->shape is NULL", name);
  int64_t numel = 1;
  for (int k = 0; k < t->ndim; ++k) {
    if (t->shape[k] < 0)
      fail(XVK_ERROR_INVALID_ARGUMENT, "%s has a negative size %lld in dimension %d", name,
           (long long)t->shape[k], k);
    if (t->shape[k] != 0 && numel > INT64_MAX / t->shape[k])
      fail(XVK_ERROR_INVALID_ARGUMENT, "%s has more elements than fit in 64 bits", name);
    numel *= t->shape[k];
  }
  const int32_t id = dtype_id(t->dtype);
  if (id < 0 || !(allowed & (1u << id)))
    fail(id < 0 || id == kMaskWordDtype ? XVK_ERROR_UNSUPPORTED : XVK_ERROR_INVALID_ARGUMENT,
         "%s has dtype %s; expected %s", name,
         dtype_string(t->dtype).c_str(), allowed_string(allowed).c_str());
  if (int(t->device.device_type) != int(ctx.device_type) || t->device.device_id != ctx.device_id)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s is on device (%s, %d); this %s context is on (%s, %d)", name,
         device_type_name(t->device.device_type), t->device.device_id, xvk_backend_name(ctx.backend),
         device_type_name(ctx.device_type), ctx.device_id);
  View v;
  v.name = name;
  v.tensor = t;
  v.dtype = id;
  v.elem_size = t->dtype.bits / 8;
  if (numel > 0 && !t->data) fail(XVK_ERROR_INVALID_ARGUMENT, "%s->data is NULL", name);
  // An empty tensor may have data == NULL with any byte_offset; NULL + offset is undefined behaviour.
  v.base = t->data ? static_cast<char *>(t->data) + t->byte_offset : nullptr;
  if (reinterpret_cast<uintptr_t>(v.base) % uint64_t(v.elem_size) != 0)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s's address (data + byte_offset) is not aligned to its %lld-byte elements",
         name, (long long)v.elem_size);
  return v;
}

namespace {

// Byte range [lo, hi) a view can touch; empty for an empty view.
struct Span {
  uintptr_t lo = 0, hi = 0;
};
Span span_of(const View &v) {
  if (v.rows <= 0 || v.cols <= 0) return {};
  const uintptr_t lo = reinterpret_cast<uintptr_t>(v.base);
  return {lo, lo + uintptr_t(((v.rows - 1) * v.row_stride + v.cols) * v.elem_size)};
}

bool identical(const View &a, const View &b) {
  return a.base == b.base && a.elem_size == b.elem_size && a.rows == b.rows && a.cols == b.cols &&
         (a.rows <= 1 || a.row_stride == b.row_stride);
}

// Whether two views share an element. Exact for views with the same element
// size and row stride that hold whole rows apart (slices of one matrix, such
// as the halves of a fused buffer); conservative (byte ranges) otherwise.
bool overlaps(const View &a, const View &b) {
  const Span sa = span_of(a), sb = span_of(b);
  if (sa.lo == sa.hi || sb.lo == sb.hi || sa.hi <= sb.lo || sb.hi <= sa.lo) return false;
  const int64_t stride = a.row_stride;
  const bool same_grid = a.elem_size == b.elem_size && b.row_stride == stride && stride >= a.cols &&
                         stride >= b.cols && (intptr_t(sb.lo) - intptr_t(sa.lo)) % a.elem_size == 0;
  if (!same_grid || stride <= 0) return true;
  // b's element (r', c') is a's element (r, c) when d = (r - r') * stride + (c - c').
  const int64_t d = (intptr_t(sb.lo) - intptr_t(sa.lo)) / a.elem_size;
  int64_t m = d % stride;
  if (m < 0) m += stride;
  for (int64_t dc : {m, m - stride}) {  // c - c' == dc, |dc| < stride
    if (dc > a.cols - 1 || dc < -(b.cols - 1)) continue;
    const int64_t dr = (d - dc) / stride;  // r - r'
    if (dr <= a.rows - 1 && dr >= -(b.rows - 1)) return true;
  }
  return false;
}

}  // namespace

int64_t numel_of(const DLTensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->ndim; ++k) n *= t->shape[k];
  return n;
}

const char *dtype_name(int32_t dtype) {
  switch (dtype) {
    case XVK_DTYPE_F32: return "float32";
    case XVK_DTYPE_F16: return "float16";
    case XVK_DTYPE_BF16: return "bfloat16";
    case kMaskWordDtype: return "uint32 (or int32)";
  }
  return "unknown";
}

View check_rows(const xvk_context &ctx, const char *name, const DLTensor *t, unsigned allowed,
                int normalized_ndim, bool output) {
  View v = check_common(ctx, name, t, allowed);
  if (normalized_ndim < 0 || normalized_ndim > t->ndim)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %d dimension(s); at least %d expected", name, t->ndim,
         normalized_ndim);
  const int lead = t->ndim - normalized_ndim;
  v.rows = 1;
  v.cols = 1;
  for (int k = 0; k < lead; ++k) v.rows *= t->shape[k];
  for (int k = lead; k < t->ndim; ++k) v.cols *= t->shape[k];
  v.row_stride = v.cols;
  if (!t->strides) return v;
  // Trailing (normalized) dimensions: contiguous. Size-1 dimensions carry no stride.
  int64_t expected = 1;
  for (int k = t->ndim - 1; k >= lead; --k) {
    if (t->shape[k] != 1 && t->strides[k] != expected)
      fail(XVK_ERROR_UNSUPPORTED,
           "%s has stride %lld in dimension %d, expected %lld: the normalized (trailing) dimensions "
           "must be contiguous",
           name, (long long)t->strides[k], k, (long long)expected);
    expected *= t->shape[k];
  }
  // Leading dimensions: must collapse into one row stride.
  bool have_stride = false;
  int64_t next = 0;
  for (int k = lead - 1; k >= 0; --k) {
    if (t->shape[k] == 1) continue;
    if (t->strides[k] < 0)
      fail(XVK_ERROR_UNSUPPORTED, "%s has a negative stride in dimension %d", name, k);
    if (!have_stride) {
      v.row_stride = t->strides[k];
      have_stride = true;
    } else if (t->strides[k] != next) {
      fail(XVK_ERROR_UNSUPPORTED,
           "%s has stride %lld in dimension %d, expected %lld: its leading dimensions must collapse "
           "into a single row stride",
           name, (long long)t->strides[k], k, (long long)next);
    }
    next = t->strides[k] * t->shape[k];
  }
  if (output && v.rows > 1 && v.row_stride < v.cols)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s is an output whose rows overlap (row stride %lld < %lld columns)",
         name, (long long)v.row_stride, (long long)v.cols);
  return v;
}

View check_optional_rows(const xvk_context &ctx, const char *name, const DLTensor *t,
                         unsigned allowed, int normalized_ndim, bool output) {
  return t ? check_rows(ctx, name, t, allowed, normalized_ndim, output) : View{};
}

View check_vector(const xvk_context &ctx, const char *name, const DLTensor *t, unsigned allowed,
                  int64_t expected, const char *what, const DLTensor *x, int normalized_ndim) {
  check_common(ctx, name, t, allowed);
  const int64_t numel = numel_of(t);
  if (numel != expected)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %lld elements, expected %lld (%s)", name, (long long)numel,
         (long long)expected, what);
  bool shaped_like_x = t->ndim == normalized_ndim;
  for (int k = 0; shaped_like_x && k < normalized_ndim; ++k)
    shaped_like_x = t->shape[k] == x->shape[x->ndim - normalized_ndim + k];
  if (t->ndim != 1 && !shaped_like_x)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has shape %s; expected 1-D or the normalized shape of x", name,
         shape_string(t).c_str());
  return check_rows(ctx, name, t, allowed, t->ndim, true);
}

View check_row_stats(const xvk_context &ctx, const char *name, const DLTensor *t, int64_t rows) {
  check_common(ctx, name, t, kFloat32Only);
  const int64_t numel = numel_of(t);
  if (numel != rows)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has %lld elements, expected %lld (one per row)", name,
         (long long)numel, (long long)rows);
  return check_rows(ctx, name, t, kFloat32Only, t->ndim, true);
}

void check_same_shape(const View &a, const View &reference) {
  const DLTensor *t = a.tensor, *r = reference.tensor;
  bool same = t->ndim == r->ndim;
  for (int k = 0; same && k < t->ndim; ++k) same = t->shape[k] == r->shape[k];
  if (!same)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has shape %s, expected %s (the shape of %s)", a.name,
         shape_string(t).c_str(), shape_string(r).c_str(), reference.name);
}

void check_same_dtype(const View &a, const View &reference) {
  if (a.dtype != reference.dtype)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has dtype %s, expected %s (the dtype of %s)", a.name,
         dtype_name(a.dtype), dtype_name(reference.dtype), reference.name);
}

void check_param_dtype(const View &a, const View &activation) {
  if (a.dtype != activation.dtype && a.dtype != XVK_DTYPE_F32)
    fail(XVK_ERROR_INVALID_ARGUMENT, "%s has dtype %s, expected %s (the dtype of %s) or float32", a.name,
         dtype_name(a.dtype), dtype_name(activation.dtype), activation.name);
}

void check_no_overlap(std::initializer_list<const View *> outputs,
                      std::initializer_list<const View *> inputs,
                      std::initializer_list<InPlacePair> in_place) {
  auto allowed = [&](const View *out, const View *in) {
    for (const InPlacePair &p : in_place)
      if (p.output == out && p.input == in) return identical(*out, *in);
    return false;
  };
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    if (!**o) continue;
    for (auto o2 = outputs.begin(); o2 != o; ++o2)
      if (**o2 && overlaps(**o, **o2))
        fail(XVK_ERROR_INVALID_ARGUMENT, "%s and %s are outputs that share memory", (*o2)->name, (*o)->name);
    for (const View *in : inputs)
      if (*in && overlaps(**o, *in) && !allowed(*o, in))
        fail(XVK_ERROR_INVALID_ARGUMENT,
             "%s shares memory with %s; an output may only be an input itself, where the function "
             "allows in-place use",
             (*o)->name, in->name);
  }
}

void check_struct_size(uint32_t size, size_t first_size, size_t known_size, const char *type) {
  if (size < first_size || size > known_size)
    fail(XVK_ERROR_INVALID_ARGUMENT,
         "options->struct_size is %u; expected %zu to %zu: set it to sizeof(%s) or use its _INIT macro",
         size, first_size, known_size, type);
}

}  // namespace xvk
