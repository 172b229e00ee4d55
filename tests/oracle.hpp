// A float64 oracle for every xvk operator, written for the tests from the
// formulas in include/xvk/xvk.h (it shares no code with src/cpu). Inputs are
// the values as stored (already rounded to their dtype); each result comes
// with a per-element `scale` for compare() in test_support.hpp: the magnitude
// of the terms the result is computed from, which bounds the error that fp32
// arithmetic in a correct backend can make (see the Tolerance comment).
#pragma once

#include <cstdint>
#include <vector>

#include "test_support.hpp"

namespace xvk_test::oracle {

struct Expected {
  std::vector<double> ref, scale;
};

struct SoftmaxSpec {
  std::vector<int64_t> shape;  // x's shape; softmax runs over the last dimension
  float scale = 1.0f;
  int causal = XVK_CAUSAL_NONE;
  std::vector<int64_t> mask_shape;  // empty: no mask; else broadcast to shape by NumPy rules
  std::vector<float> mask;          // contiguous, mask_shape
};

// y = softmax(scale * x + mask) (or log_softmax), causal positions removed;
// a row with a NaN is NaN, a row with nothing left is 0 (log: -inf).
Expected softmax_forward(const SoftmaxSpec &spec, const std::vector<float> &x, bool log);

// dx from the forward's stored output y and dy, rows x cols.
Expected softmax_backward(int64_t rows, int64_t cols, const std::vector<float> &y, const std::vector<float> &dy,
                          float scale, bool log);

struct NormSpec {
  bool rms = false;
  int64_t rows = 0, cols = 0;
  float epsilon = 1e-5f;
  bool zero_centered_gamma = false;
  DType dtype = DType::f32;  // of x: x + residual is rounded to it (it is what residual_out holds)
};

struct NormForward {
  Expected y, mean, rstd, h;  // h = x + residual as stored (or x)
};

// Pointers may be NULL (no residual / gamma / beta).
NormForward norm_forward(const NormSpec &spec, const std::vector<float> &x, const std::vector<float> *residual,
                         const std::vector<float> *gamma, const std::vector<float> *beta);

struct NormBackward {
  Expected dx, dgamma, dbeta;
};

// From dy, the forward's input h (`x`), gamma (or NULL) and the saved float
// statistics (mean is ignored for RMSNorm).
NormBackward norm_backward(const NormSpec &spec, const std::vector<float> &dy, const std::vector<float> &x,
                           const std::vector<float> *gamma, const std::vector<float> &mean,
                           const std::vector<float> &rstd);

}  // namespace xvk_test::oracle
