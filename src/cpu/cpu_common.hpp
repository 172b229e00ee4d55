// Shared helpers of the CPU backend: dtype dispatch, element access in double
// precision, and the (optional) OpenMP thread pool.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/backend_api.h"
#include "core/half.hpp"

namespace xvk::cpu {

#ifdef _OPENMP
inline int max_threads() { return omp_get_max_threads(); }
inline int thread_id() { return omp_get_thread_num(); }
#else
inline int max_threads() { return 1; }
inline int thread_id() { return 0; }
#endif

// OpenMP's fork and join cost microseconds a call: below this many elements
// one thread is done sooner (1 x 32 fp16 softmax on a 2-core host: 7.5 us a
// call with the thread team, mostly GOMP_parallel).
constexpr int64_t kParallelMinElements = int64_t(1) << 14;
inline bool worth_threads(int64_t elements) { return elements >= kParallelMinElements; }

// body(i) for i in [0, n): shared out among OpenMP's threads when the call's
// `elements` are worth them, else run in this thread without entering a
// parallel region at all. (A region under if (false) still goes through
// libgomp's team start and end, a futex system call each time: 3.0-3.7 us per
// 1 x 1 softmax or LayerNorm call on a 2-core VM.)
template <class Body>
void parallel_for(int64_t n, int64_t elements, Body &&body) {
  if (worth_threads(elements)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Calls f with a value of the storage type of dtype (float, half_t, bfloat16_t).
template <class F>
void dispatch(int32_t dtype, F &&f) {
  switch (dtype) {
    case XVK_DTYPE_F16: f(half_t{}); break;
    case XVK_DTYPE_BF16: f(bfloat16_t{}); break;
    default: f(float{}); break;
  }
}

template <class T>
inline const T *row_of(const xvk_rows_view &v, int64_t r) {
  return static_cast<const T *>(v.data) + r * v.row_stride;
}
template <class T>
inline T *mutable_row_of(const xvk_rows_view &v, int64_t r) {
  return static_cast<T *>(v.data) + r * v.row_stride;
}

// Rounds through float, as every backend stores its float32 results.
template <class T>
inline T store(double v) {
  return from_float<T>(static_cast<float>(v));
}

// A parameter vector (gamma, beta) of `dtype` as doubles; `absent` fills it
// when p is NULL, `add` is added to each element (1 for zero-centered gamma).
inline std::vector<double> load_params(const void *p, int32_t dtype, int64_t n, double absent, double add) {
  std::vector<double> out(size_t(n), absent);
  if (!p) return out;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *v = static_cast<const T *>(p);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(to_float(v[i])) + add;
  });
  return out;
}

// Writes a per-column result vector in `dtype`.
inline void store_params(void *p, int32_t dtype, const std::vector<double> &v) {
  if (!p) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T *out = static_cast<T *>(p);
    for (size_t i = 0; i < v.size(); ++i) out[i] = store<T>(v[i]);
  });
}

}  // namespace xvk::cpu
