// Validation of DLTensor arguments and options structs: the one place where
// the core checks what callers pass. Every check throws xvk::Error with a
// message that names the argument, before any backend runs, so a failing call
// writes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "core/context.hpp"

namespace xvk {

// 32-bit words of a bitmask (uint32, or int32 for frameworks without uint32):
// a dtype id of the core only, never handed to a backend as an element type.
constexpr int32_t kMaskWordDtype = XVK_DTYPE_BF16 + 1;

// Which dtypes a tensor argument may have.
enum DtypeSet : unsigned {
  kFloat32Only = 1u << XVK_DTYPE_F32,
  kAnyFloat = (1u << XVK_DTYPE_F32) | (1u << XVK_DTYPE_F16) | (1u << XVK_DTYPE_BF16),
  kMaskWords = 1u << kMaskWordDtype,
};

// A checked tensor seen as rows x cols, with one row stride (in elements).
struct View {
  const char *name = nullptr;  // the argument's name, for messages
  const DLTensor *tensor = nullptr;
  char *base = nullptr;  // data + byte_offset
  int32_t dtype = XVK_DTYPE_F32;
  int64_t elem_size = 4;
  int64_t rows = 0, cols = 0, row_stride = 0;

  explicit operator bool() const { return tensor != nullptr; }
  xvk_rows_view rows_view() const { return {base, row_stride}; }
};

const char *dtype_name(int32_t dtype);

// The number of elements of t (the product of its shape; 1 for ndim 0).
int64_t numel_of(const DLTensor *t);

// The checks every tensor argument gets (not NULL, sane shape, dtype in
// `allowed`, the context's device, data present and element-aligned); fills
// name, tensor, base, dtype and elem_size, but not the rows x cols layout.
View check_common(const xvk_context &ctx, const char *name, const DLTensor *t, unsigned allowed);

// Checks everything a tensor needs whatever its role: not NULL, a sane shape,
// a dtype in `allowed`, the context's device, data present and aligned.
// Then lays it out as rows x cols with the trailing `normalized_ndim`
// dimensions contiguous (normalized_ndim == ndim gives a single row; 0 is a
// scalar-per-row view, cols == 1). `output` demands rows that do not overlap.
View check_rows(const xvk_context &ctx, const char *name, const DLTensor *t, unsigned allowed,
                int normalized_ndim, bool output);

// The same, for an optional argument: returns an empty View for NULL.
View check_optional_rows(const xvk_context &ctx, const char *name, const DLTensor *t,
                         unsigned allowed, int normalized_ndim, bool output);

// A per-column vector such as gamma: contiguous, `expected` elements, and
// either 1-D or shaped like x's trailing normalized dimensions.
View check_vector(const xvk_context &ctx, const char *name, const DLTensor *t, unsigned allowed,
                  int64_t expected, const char *what, const DLTensor *x, int normalized_ndim);

// A per-row float32 vector such as mean: contiguous, one element per row.
View check_row_stats(const xvk_context &ctx, const char *name, const DLTensor *t, int64_t rows);

void check_same_shape(const View &a, const View &reference);
void check_same_dtype(const View &a, const View &reference);
// a's dtype must be reference's or float32 (parameters of mixed-precision ops).
void check_param_dtype(const View &a, const View &activation);

// No output may share memory with another output or an input, except the
// pairs listed in `in_place`, and those only when both views are identical.
struct InPlacePair {
  const View *output;
  const View *input;
};
void check_no_overlap(std::initializer_list<const View *> outputs,
                      std::initializer_list<const View *> inputs,
                      std::initializer_list<InPlacePair> in_place);

// Reads an options struct per DESIGN.md: NULL gives `defaults`; a
// struct_size below first_size or above sizeof(T) is an error; fields past a
// smaller struct_size keep their defaults.
void check_struct_size(uint32_t size, size_t first_size, size_t known_size, const char *type);
template <class T>
T read_options(const T *user, const T &defaults, size_t first_size, const char *type) {
  if (!user) return defaults;
  check_struct_size(user->struct_size, first_size, sizeof(T), type);
  T out = defaults;
  std::memcpy(&out, user, user->struct_size);
  return out;
}

}  // namespace xvk
