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

// ---------------------------------------------------------------------------
// BatchNorm
//
// Values are in (n, c, s) order whatever the memory order of the tensors:
// element (batch i, channel ch, spatial position j) is at (i * c + ch) * s + j
// (the suite maps tensors to and from this order). Inputs are the values as
// stored, widened to double (so that finite differences can move them).
// ---------------------------------------------------------------------------

struct BatchNormSpec {
  int64_t n = 0, c = 0, s = 1;
  float epsilon = 1e-5f, momentum = 0.1f;
  bool relu = false;
  DType dtype = DType::f32;  // of y: y as stored in it decides `positive` (the mask)
};

struct BatchNormForward {
  Expected y;                // activation(v), unrounded
  Expected pre;              // v = (x - mean) * rstd * gamma + beta (+ z), before the activation
  Expected mean, rstd;       // per channel: the batch's (training) or from the running statistics (inference)
  Expected running_mean, running_var;  // training: after the momentum update (unbiased variance); else as given
  std::vector<bool> positive;  // per element: y rounded to spec.dtype > 0
};

// training: batch statistics (needs n * s > 1); running_* may be NULL (no
// update). Inference: running_mean and running_var are required.
// z, gamma, beta may be NULL (absent: 0, 1, 0).
BatchNormForward batch_norm_forward(const BatchNormSpec &spec, bool training, const std::vector<double> &x,
                                    const std::vector<double> *z, const std::vector<double> *gamma,
                                    const std::vector<double> *beta, const std::vector<double> *running_mean,
                                    const std::vector<double> *running_var);

struct BatchNormBackward {
  Expected dx, dz, dgamma, dbeta;
};

// From dy, the forward's x, gamma (or NULL: 1), its saved statistics, and
// under ReLU (spec.relu) where y > 0 (`positive`, one flag per element).
BatchNormBackward batch_norm_backward(const BatchNormSpec &spec, const std::vector<double> &dy,
                                      const std::vector<double> &x, const std::vector<double> *gamma,
                                      const std::vector<double> &saved_mean, const std::vector<double> &saved_rstd,
                                      const std::vector<bool> *positive);

}  // namespace xvk_test::oracle
