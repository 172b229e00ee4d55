// The CPU backend against the float64 oracle of tests/oracle.cpp (written
// from the header's formulas; it shares no code with src/cpu), on every
// dtype, on shapes from 1 column to 32768 columns, on random data (never
// zeros) including rows with a large offset, with every output poisoned
// with NaN before each run so that an unwritten element fails.
// Backwards are also checked against central finite differences of the
// forward, and for determinism.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "test_support.hpp"

using namespace xvk_test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

#define CHECK_CLOSE(comparison)                        \
  do {                                                 \
    const Comparison c_ = (comparison);                \
    CHECK_MESSAGE(c_.ok, c_.message());                \
  } while (0)

// (rows, cols) pairs: every interesting column count, with a rotating row
// count (1 and primes), then a few random shapes from the same categories;
// capped so that a case holds at most max_elems.
std::vector<std::pair<int64_t, int64_t>> row_col_cases(Rng &rng, int64_t max_elems = int64_t(1) << 16) {
  const std::vector<int64_t> rows = interesting_rows();
  std::vector<int64_t> cols = interesting_cols();
  for (int i = 0; i < 6; ++i) cols.push_back(random_cols(rng));
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < cols.size(); ++i) {
    int64_t r = rows[i % rows.size()];
    if (r * cols[i] > max_elems) r = std::max<int64_t>(1, max_elems / cols[i]);
    out.emplace_back(r, cols[i]);
  }
  return out;
}

std::string describe(const char *what, DType dt, const std::vector<int64_t> &shape) {
  return std::string(what) + " " + dtype_name(dt) + " " + shape_string(shape);
}

// Data of a row-major tensor: N(mean, std) per element.
struct Data {
  double mean, std;
  const char *name;
};

// Data with a large offset relative to its spread, per dtype (the offset
// must be representable, and the spread larger than its ulp there).
Data offset_data(DType dt) {
  switch (dt) {
    case DType::f16: return {3000.0, 4.0, "mean 3000 std 4"};
    case DType::bf16: return {1000.0, 30.0, "mean 1000 std 30"};
    default: return {1e4, 1e-2, "mean 1e4 std 1e-2"};
  }
}

// ---------------------------------------------------------------------------
// Softmax
// ---------------------------------------------------------------------------

// Runs the forward on the CPU backend and compares with the oracle.
void softmax_forward_case(xvk_context *ctx, Rng &rng, const oracle::SoftmaxSpec &spec, DType dt, bool log,
                          const Data &data, const std::vector<float> *given_x = nullptr) {
  INFO(describe(log ? "log_softmax" : "softmax", dt, spec.shape) << " scale " << spec.scale << " causal "
                                                                    << spec.causal << " mask "
                                                                    << shape_string(spec.mask_shape) << " data "
                                                                    << std::string(data.name));
  const size_t n = size_t(product(spec.shape));
  const std::vector<float> xv = given_x ? *given_x : rng.normal(n, data.mean, data.std, dt);
  Tensor x(ctx, spec.shape, dt), y(ctx, spec.shape, dt);
  x.fill(xv);
  std::unique_ptr<Tensor> mask;
  xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
  o.scale = spec.scale;
  o.causal = spec.causal;
  if (!spec.mask_shape.empty()) {
    mask = std::make_unique<Tensor>(ctx, spec.mask_shape, dt);
    mask->fill(spec.mask);
    o.mask = mask->dl();
  }
  y.poison();
  const xvk_status_t s = log ? xvk_log_softmax_forward(ctx, x.dl(), &o, y.dl()) : xvk_softmax_forward(ctx, x.dl(), &o, y.dl());
  REQUIRE_MESSAGE(s == XVK_SUCCESS, xvk_last_error_message());
  const oracle::Expected e = oracle::softmax_forward(spec, xv, log);
  CHECK_CLOSE(compare("y", y.read(), e.ref, e.scale, tolerance(dt)));
}

void check_softmax_forward(DType dt) {
  Context ctx;
  Rng rng(1000 + uint64_t(dt));
  for (bool log : {false, true})
    for (auto [rows, cols] : row_col_cases(rng)) {
      oracle::SoftmaxSpec spec;
      spec.shape = {rows, cols};
      softmax_forward_case(ctx, rng, spec, dt, log, {0.0, 1.0, "N(0, 1)"});
      spec.scale = 0.125f;
      softmax_forward_case(ctx, rng, spec, dt, log, {0.0, 8.0, "N(0, 8)"});
      // Without subtracting the row maximum, exp overflows on these rows.
      spec.scale = 1.0f;
      softmax_forward_case(ctx, rng, spec, dt, log, offset_data(dt));
    }
}

// Masks: broadcast shapes over x [2, 3, q, k], -inf entries, causal modes.
void check_softmax_masked(DType dt) {
  Context ctx;
  Rng rng(2000 + uint64_t(dt));
  const std::pair<int64_t, int64_t> qks[] = {{5, 7}, {7, 5}, {1, 13}, {13, 1}, {16, 16}, {3, 1000}};
  for (bool log : {false, true})
    for (auto [q, k] : qks)
      for (int causal : {XVK_CAUSAL_NONE, XVK_CAUSAL_TOP_LEFT, XVK_CAUSAL_BOTTOM_RIGHT}) {
        const std::vector<std::vector<int64_t>> mask_shapes = {{}, {k}, {q, k}, {2, 1, q, k}, {1, 3, 1, k}, {3, 1, k}};
        for (const auto &mask_shape : mask_shapes) {
          oracle::SoftmaxSpec spec;
          spec.shape = {2, 3, q, k};
          spec.scale = -0.7f;  // negative scales are valid
          spec.causal = causal;
          spec.mask_shape = mask_shape;
          if (!mask_shape.empty()) {
            spec.mask = rng.normal(size_t(product(mask_shape)), 0.0, 2.0, dt);
            for (float &m : spec.mask)
              if (rng.integer(0, 9) == 0) m = -kInf;  // about 10% masked out
          }
          softmax_forward_case(ctx, rng, spec, dt, log, {0.0, 1.0, "N(0, 1)"});
        }
      }
}

void check_softmax_backward(DType dt) {
  Context ctx;
  Rng rng(3000 + uint64_t(dt));
  for (bool log : {false, true})
    for (auto [rows, cols] : row_col_cases(rng)) {
      for (float scale : {1.0f, -0.3f}) {
        INFO(describe(log ? "log_softmax_backward" : "softmax_backward", dt, {rows, cols}) << " scale " << scale);
        const size_t n = size_t(rows * cols);
        Tensor x(ctx, {rows, cols}, dt), y(ctx, {rows, cols}, dt), dy(ctx, {rows, cols}, dt), dx(ctx, {rows, cols}, dt);
        x.fill(rng.normal(n, 0, 2, dt));
        xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
        o.causal = rows > 1 ? XVK_CAUSAL_BOTTOM_RIGHT : XVK_CAUSAL_NONE;  // some zeros / -inf in y
        REQUIRE(xvk_softmax_forward(ctx, x.dl(), &o, y.dl()) == XVK_SUCCESS);
        if (log) REQUIRE(xvk_log_softmax_forward(ctx, x.dl(), &o, y.dl()) == XVK_SUCCESS);
        const std::vector<float> yv = y.read(), dyv = rng.normal(n, 0, 1, dt);
        dy.fill(dyv);
        o = XVK_SOFTMAX_OPTIONS_INIT;
        o.scale = scale;
        dx.poison();
        REQUIRE((log ? xvk_log_softmax_backward(ctx, y.dl(), dy.dl(), &o, dx.dl())
                     : xvk_softmax_backward(ctx, y.dl(), dy.dl(), &o, dx.dl())) == XVK_SUCCESS);
        const oracle::Expected e = oracle::softmax_backward(rows, cols, yv, dyv, scale, log);
        CHECK_CLOSE(compare("dx", dx.read(), e.ref, e.scale, tolerance(dt)));
      }
    }
}

// ---------------------------------------------------------------------------
// LayerNorm and RMSNorm
// ---------------------------------------------------------------------------

struct NormCase {
  bool rms = false;
  DType dt = DType::f32, param_dt = DType::f32;
  bool gamma = true, beta = true, zero_centered = false, residual = false, stats = true;
  std::vector<int64_t> shape;  // x's shape
  int normalized_ndim = 1;
  float epsilon = 1e-5f;
  Data data{0.0, 1.0, "N(0, 1)"};
  bool dgamma = true, dbeta = true;  // backward

  int64_t cols() const { return product({shape.end() - normalized_ndim, shape.end()}); }
  int64_t rows() const { return product(shape) / std::max<int64_t>(1, cols()); }
  std::vector<int64_t> param_shape() const { return {shape.end() - normalized_ndim, shape.end()}; }
  std::string text() const {
    std::string s = std::string(rms ? "rms_norm " : "layer_norm ") + dtype_name(dt) + " params " +
                    dtype_name(param_dt) + " " + shape_string(shape) + " nd " + std::to_string(normalized_ndim) +
                    " data " + data.name;
    if (!gamma) s += " no-gamma";
    if (!beta || rms) s += " no-beta";
    if (zero_centered) s += " zero-centered";
    if (residual) s += " residual";
    if (!stats) s += " no-stats";
    return s;
  }
};

// Inputs of one norm case, in the form both the backend and the oracle take.
struct NormInputs {
  std::vector<float> x, residual, gamma, beta;
};

NormInputs norm_inputs(Rng &rng, const NormCase &c) {
  NormInputs in;
  const size_t n = size_t(product(c.shape)), cols = size_t(c.cols());
  in.x = rng.normal(n, c.data.mean, c.data.std, c.dt);
  if (c.residual) in.residual = rng.normal(n, 0.0, c.data.std, c.dt);
  if (c.gamma) in.gamma = rng.normal(cols, c.zero_centered ? 0.0 : 1.0, 0.5, c.param_dt);
  if (c.beta && !c.rms) in.beta = rng.normal(cols, 0.0, 0.5, c.param_dt);
  return in;
}

oracle::NormSpec spec_of(const NormCase &c) {
  oracle::NormSpec s;
  s.rms = c.rms;
  s.rows = c.rows();
  s.cols = c.cols();
  s.epsilon = c.epsilon;
  s.zero_centered_gamma = c.zero_centered;
  s.dtype = c.dt;
  return s;
}

// The forward on the CPU backend: y, mean, rstd, residual_out.
struct NormOutputs {
  std::vector<float> y, mean, rstd, h;
};

NormOutputs run_norm_forward(xvk_context *ctx, const NormCase &c, const NormInputs &in) {
  const int64_t rows = c.rows();
  Tensor x(ctx, c.shape, c.dt), y(ctx, c.shape, c.dt), mean(ctx, {rows}, DType::f32), rstd(ctx, {rows}, DType::f32);
  Tensor res(ctx, c.shape, c.dt), res_out(ctx, c.shape, c.dt);
  Tensor gamma(ctx, c.param_shape(), c.param_dt), beta(ctx, c.param_shape(), c.param_dt);
  x.fill(in.x);
  if (c.residual) res.fill(in.residual);
  if (c.gamma) gamma.fill(in.gamma);
  if (!in.beta.empty()) beta.fill(in.beta);
  for (Tensor *t : {&y, &mean, &rstd, &res_out}) t->poison();
  xvk_status_t s;
  if (c.rms) {
    xvk_rms_norm_options o = XVK_RMS_NORM_OPTIONS_INIT;
    o.epsilon = c.epsilon;
    o.normalized_ndim = c.normalized_ndim;
    o.zero_centered_gamma = c.zero_centered;
    o.residual = c.residual ? res.dl() : nullptr;
    o.residual_out = c.residual ? res_out.dl() : nullptr;
    s = xvk_rms_norm_forward(ctx, x.dl(), c.gamma ? gamma.dl() : nullptr, &o, y.dl(), c.stats ? rstd.dl() : nullptr);
  } else {
    xvk_layer_norm_options o = XVK_LAYER_NORM_OPTIONS_INIT;
    o.epsilon = c.epsilon;
    o.normalized_ndim = c.normalized_ndim;
    o.zero_centered_gamma = c.zero_centered;
    o.residual = c.residual ? res.dl() : nullptr;
    o.residual_out = c.residual ? res_out.dl() : nullptr;
    s = xvk_layer_norm_forward(ctx, x.dl(), c.gamma ? gamma.dl() : nullptr, c.beta ? beta.dl() : nullptr, &o, y.dl(),
                               c.stats ? mean.dl() : nullptr, c.stats ? rstd.dl() : nullptr);
  }
  REQUIRE_MESSAGE(s == XVK_SUCCESS, xvk_last_error_message());
  NormOutputs out;
  out.y = y.read();
  if (c.stats) {
    out.rstd = rstd.read();
    if (!c.rms) out.mean = mean.read();
  }
  if (c.residual) out.h = res_out.read();
  return out;
}

void norm_forward_case(xvk_context *ctx, Rng &rng, const NormCase &c) {
  INFO(c.text());
  const NormInputs in = norm_inputs(rng, c);
  const NormOutputs got = run_norm_forward(ctx, c, in);
  const oracle::NormForward e = oracle::norm_forward(spec_of(c), in.x, c.residual ? &in.residual : nullptr,
                                                     c.gamma ? &in.gamma : nullptr, in.beta.empty() ? nullptr : &in.beta);
  CHECK_CLOSE(compare("y", got.y, e.y.ref, e.y.scale, tolerance(c.dt)));
  if (c.stats) {
    CHECK_CLOSE(compare("rstd", got.rstd, e.rstd.ref, e.rstd.scale, tolerance(DType::f32)));
    if (!c.rms) CHECK_CLOSE(compare("mean", got.mean, e.mean.ref, e.mean.scale, tolerance(DType::f32)));
  }
  if (c.residual) CHECK_CLOSE(compare("residual_out", got.h, e.h.ref, e.h.scale, tolerance(c.dt)));
}

void norm_backward_case(xvk_context *ctx, Rng &rng, const NormCase &c) {
  INFO(c.text() << (c.dgamma ? "" : " no-dgamma") << (c.dbeta ? "" : " no-dbeta"));
  NormCase fwd = c;
  fwd.stats = true;
  fwd.residual = false;
  const NormInputs in = norm_inputs(rng, fwd);
  const NormOutputs saved = run_norm_forward(ctx, fwd, in);
  const int64_t rows = c.rows();
  const std::vector<float> dyv = rng.normal(in.x.size(), 0.0, 1.0, c.dt);
  Tensor dy(ctx, c.shape, c.dt), x(ctx, c.shape, c.dt), dx(ctx, c.shape, c.dt);
  Tensor gamma(ctx, c.param_shape(), c.param_dt), dgamma(ctx, c.param_shape(), c.param_dt),
      dbeta(ctx, c.param_shape(), c.param_dt);
  Tensor mean(ctx, {rows}, DType::f32), rstd(ctx, {rows}, DType::f32);
  dy.fill(dyv);
  x.fill(in.x);
  if (c.gamma) gamma.fill(in.gamma);
  rstd.fill(saved.rstd);
  if (!c.rms) mean.fill(saved.mean);
  for (Tensor *t : {&dx, &dgamma, &dbeta}) t->poison();
  xvk_status_t s;
  if (c.rms) {
    xvk_rms_norm_options o = XVK_RMS_NORM_OPTIONS_INIT;
    o.normalized_ndim = c.normalized_ndim;
    o.zero_centered_gamma = c.zero_centered;
    s = xvk_rms_norm_backward(ctx, dy.dl(), x.dl(), c.gamma ? gamma.dl() : nullptr, rstd.dl(), &o, dx.dl(),
                              c.dgamma ? dgamma.dl() : nullptr);
  } else {
    xvk_layer_norm_options o = XVK_LAYER_NORM_OPTIONS_INIT;
    o.normalized_ndim = c.normalized_ndim;
    o.zero_centered_gamma = c.zero_centered;
    s = xvk_layer_norm_backward(ctx, dy.dl(), x.dl(), c.gamma ? gamma.dl() : nullptr, mean.dl(), rstd.dl(), &o,
                                dx.dl(), c.dgamma ? dgamma.dl() : nullptr, c.dbeta ? dbeta.dl() : nullptr);
  }
  REQUIRE_MESSAGE(s == XVK_SUCCESS, xvk_last_error_message());
  const oracle::NormBackward e =
      oracle::norm_backward(spec_of(c), dyv, in.x, c.gamma ? &in.gamma : nullptr, saved.mean, saved.rstd);
  CHECK_CLOSE(compare("dx", dx.read(), e.dx.ref, e.dx.scale, tolerance(c.dt)));
  if (c.dgamma) CHECK_CLOSE(compare("dgamma", dgamma.read(), e.dgamma.ref, e.dgamma.scale, tolerance(c.param_dt)));
  const bool has_dbeta = c.dbeta && !c.rms;
  if (has_dbeta) CHECK_CLOSE(compare("dbeta", dbeta.read(), e.dbeta.ref, e.dbeta.scale, tolerance(c.param_dt)));
  // Outputs not asked for are not written.
  if (!c.dgamma) CHECK(std::isnan(dgamma.read()[0]));
  if (!has_dbeta) CHECK(std::isnan(dbeta.read()[0]));
}

// The option combinations, visited in turn as the shapes go by.
NormCase norm_config(bool rms, DType dt, size_t k) {
  NormCase c;
  c.rms = rms;
  c.dt = dt;
  c.param_dt = (k % 2) ? DType::f32 : dt;  // mixed precision: fp32 parameters with 16-bit activations
  c.gamma = (k % 5) != 3;
  c.beta = (k % 3) != 2;
  c.zero_centered = (k % 4) == 1;
  c.residual = (k % 3) == 0;
  c.stats = (k % 7) != 5;
  c.dgamma = (k % 5) != 4;
  c.dbeta = (k % 4) != 2;
  return c;
}

void check_norm_forward(bool rms, DType dt) {
  Context ctx;
  Rng rng(4000 + uint64_t(dt) + (rms ? 100 : 0));
  size_t k = 0;
  for (auto [rows, cols] : row_col_cases(rng)) {
    for (const Data &data : {Data{0.0, 1.0, "N(0, 1)"}, offset_data(dt), Data{-3.0, 0.01, "mean -3 std 0.01"}}) {
      NormCase c = norm_config(rms, dt, k++);
      c.shape = {rows, cols};
      c.data = data;
      norm_forward_case(ctx, rng, c);
    }
  }
  // Every combination of options once, on an odd shape.
  for (size_t m = 0; m < 64; ++m) {
    NormCase c;
    c.rms = rms;
    c.dt = dt;
    c.param_dt = (m & 1) ? DType::f32 : dt;
    c.gamma = m & 2;
    c.beta = m & 4;
    c.zero_centered = m & 8;
    c.residual = m & 16;
    c.stats = m & 32;
    c.shape = {3, 37};
    norm_forward_case(ctx, rng, c);
  }
  // Normalized over the last two dimensions, gamma shaped like them.
  for (bool residual : {false, true}) {
    NormCase c = norm_config(rms, dt, 1);
    c.shape = {2, 3, 6, 5};
    c.normalized_ndim = 2;
    c.residual = residual;
    norm_forward_case(ctx, rng, c);
  }
}

void check_norm_backward(bool rms, DType dt) {
  Context ctx;
  Rng rng(5000 + uint64_t(dt) + (rms ? 100 : 0));
  size_t k = 0;
  for (auto [rows, cols] : row_col_cases(rng)) {
    for (const Data &data : {Data{0.0, 1.0, "N(0, 1)"}, offset_data(dt)}) {
      NormCase c = norm_config(rms, dt, k++);
      c.shape = {rows, cols};
      c.data = data;
      norm_backward_case(ctx, rng, c);
    }
  }
  // Many rows: dgamma/dbeta sum over rows.
  NormCase c = norm_config(rms, dt, 0);
  c.shape = {517, 33};
  c.dgamma = c.dbeta = c.gamma = true;
  norm_backward_case(ctx, rng, c);
  c.shape = {4, 3, 6, 5};
  c.normalized_ndim = 2;
  c.zero_centered = true;
  norm_backward_case(ctx, rng, c);
}

}  // namespace

TEST_CASE("softmax forward f32") { check_softmax_forward(DType::f32); }
TEST_CASE("softmax forward f16") { check_softmax_forward(DType::f16); }
TEST_CASE("softmax forward bf16") { check_softmax_forward(DType::bf16); }
TEST_CASE("softmax masked and causal f32") { check_softmax_masked(DType::f32); }
TEST_CASE("softmax masked and causal f16") { check_softmax_masked(DType::f16); }
TEST_CASE("softmax masked and causal bf16") { check_softmax_masked(DType::bf16); }
TEST_CASE("softmax backward f32") { check_softmax_backward(DType::f32); }
TEST_CASE("softmax backward f16") { check_softmax_backward(DType::f16); }
TEST_CASE("softmax backward bf16") { check_softmax_backward(DType::bf16); }
TEST_CASE("layer_norm forward f32") { check_norm_forward(false, DType::f32); }
TEST_CASE("layer_norm forward f16") { check_norm_forward(false, DType::f16); }
TEST_CASE("layer_norm forward bf16") { check_norm_forward(false, DType::bf16); }
TEST_CASE("rms_norm forward f32") { check_norm_forward(true, DType::f32); }
TEST_CASE("rms_norm forward f16") { check_norm_forward(true, DType::f16); }
TEST_CASE("rms_norm forward bf16") { check_norm_forward(true, DType::bf16); }
TEST_CASE("layer_norm backward f32") { check_norm_backward(false, DType::f32); }
TEST_CASE("layer_norm backward f16") { check_norm_backward(false, DType::f16); }
TEST_CASE("layer_norm backward bf16") { check_norm_backward(false, DType::bf16); }
TEST_CASE("rms_norm backward f32") { check_norm_backward(true, DType::f32); }
TEST_CASE("rms_norm backward f16") { check_norm_backward(true, DType::f16); }
TEST_CASE("rms_norm backward bf16") { check_norm_backward(true, DType::bf16); }

// ===========================================================================
// Special values: NaN in, NaN out; fully masked rows
// ===========================================================================

TEST_CASE("softmax: a NaN makes its row NaN and only its row") {
  Context ctx;
  Rng rng(6000);
  for (DType dt : kAllDtypes)
    for (bool log : {false, true}) {
      oracle::SoftmaxSpec spec;
      spec.shape = {4, 9};
      std::vector<float> x = rng.normal(36, 0, 1, dt);
      x[1 * 9 + 3] = kNaN;  // row 1
      softmax_forward_case(ctx, rng, spec, dt, log, {0, 1, "N(0, 1) with a NaN in row 1"}, &x);
      // In the mask (row 2), and in x where the mask is -inf (row 0).
      x = rng.normal(36, 0, 1, dt);
      x[0 * 9 + 8] = kNaN;
      spec.mask_shape = {4, 9};
      spec.mask = rng.normal(36, 0, 1, dt);
      spec.mask[2 * 9 + 0] = kNaN;
      spec.mask[0 * 9 + 8] = -kInf;
      softmax_forward_case(ctx, rng, spec, dt, log, {0, 1, "N(0, 1) with NaNs in rows 0 and 2"}, &x);
      // Directly: the rows are NaN, the others are not.
      Tensor tx(ctx, {4, 9}, dt), ty(ctx, {4, 9}, dt), tm(ctx, {4, 9}, dt);
      tx.fill(x);
      tm.fill(spec.mask);
      xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
      o.mask = tm.dl();
      REQUIRE((log ? xvk_log_softmax_forward(ctx, tx.dl(), &o, ty.dl()) : xvk_softmax_forward(ctx, tx.dl(), &o, ty.dl())) ==
              XVK_SUCCESS);
      const std::vector<float> y = ty.read();
      for (int r = 0; r < 4; ++r)
        for (int j = 0; j < 9; ++j) CHECK(std::isnan(y[size_t(r * 9 + j)]) == (r == 0 || r == 2));
    }
}

TEST_CASE("softmax: a fully masked row is zeros (log-softmax: -inf)") {
  Context ctx;
  Rng rng(6100);
  for (DType dt : kAllDtypes)
    for (bool log : {false, true}) {
      INFO(std::string(dtype_name(dt)) << (log ? " log_softmax" : " softmax"));
      const float fill = log ? -kInf : 0.0f;
      // By the mask: row 1 entirely -inf.
      Tensor x(ctx, {3, 11}, dt), y(ctx, {3, 11}, dt), mask(ctx, {3, 11}, dt);
      x.fill(rng.normal(33, 0, 1, dt));
      std::vector<float> m = rng.normal(33, 0, 1, dt);
      for (int j = 0; j < 11; ++j) m[size_t(11 + j)] = -kInf;
      mask.fill(m);
      xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
      o.mask = mask.dl();
      y.poison();
      REQUIRE((log ? xvk_log_softmax_forward(ctx, x.dl(), &o, y.dl()) : xvk_softmax_forward(ctx, x.dl(), &o, y.dl())) ==
              XVK_SUCCESS);
      std::vector<float> got = y.read();
      for (int j = 0; j < 11; ++j) {
        CHECK(got[size_t(11 + j)] == fill);
        CHECK(std::isfinite(got[size_t(j)]));
      }
      // By -inf inputs.
      std::vector<float> xv = rng.normal(33, 0, 1, dt);
      for (int j = 0; j < 11; ++j) xv[size_t(22 + j)] = -kInf;
      x.fill(xv);
      y.poison();
      REQUIRE((log ? xvk_log_softmax_forward(ctx, x.dl(), nullptr, y.dl()) : xvk_softmax_forward(ctx, x.dl(), nullptr, y.dl())) ==
              XVK_SUCCESS);
      got = y.read();
      for (int j = 0; j < 11; ++j) CHECK(got[size_t(22 + j)] == fill);
      // By the bottom-right causal mask with more queries than keys: query
      // row q keeps columns j <= q + (4 - 6), so rows 0 and 1 keep nothing.
      Tensor xc(ctx, {2, 6, 4}, dt), yc(ctx, {2, 6, 4}, dt);
      xc.fill(rng.normal(48, 0, 1, dt));
      o = XVK_SOFTMAX_OPTIONS_INIT;
      o.causal = XVK_CAUSAL_BOTTOM_RIGHT;
      yc.poison();
      REQUIRE((log ? xvk_log_softmax_forward(ctx, xc.dl(), &o, yc.dl()) : xvk_softmax_forward(ctx, xc.dl(), &o, yc.dl())) ==
              XVK_SUCCESS);
      got = yc.read();
      for (int b = 0; b < 2; ++b)
        for (int q = 0; q < 6; ++q)
          for (int j = 0; j < 4; ++j) {
            const float v = got[size_t((b * 6 + q) * 4 + j)];
            if (j <= q - 2) CHECK(std::isfinite(v));
            else CHECK(v == fill);
          }
      // Top-left with the same shape: row q keeps j <= q; every row keeps column 0.
      o.causal = XVK_CAUSAL_TOP_LEFT;
      yc.poison();
      REQUIRE((log ? xvk_log_softmax_forward(ctx, xc.dl(), &o, yc.dl()) : xvk_softmax_forward(ctx, xc.dl(), &o, yc.dl())) ==
              XVK_SUCCESS);
      got = yc.read();
      for (int q = 0; q < 6; ++q)
        for (int j = 0; j < 4; ++j) {
          const float v = got[size_t(q * 4 + j)];
          if (j <= q) CHECK(std::isfinite(v));
          else CHECK(v == fill);
        }
      CHECK(got[0] == (log ? 0.0f : 1.0f));  // row 0 keeps one column
    }
}

TEST_CASE("norms: a NaN makes its row NaN and only its row") {
  Context ctx;
  Rng rng(6200);
  for (bool rms : {false, true})
    for (DType dt : kAllDtypes) {
      INFO((std::string(rms ? "rms_norm " : "layer_norm ") + dtype_name(dt)));
      Tensor x(ctx, {3, 20}, dt), y(ctx, {3, 20}, dt), rstd(ctx, {3}, DType::f32);
      std::vector<float> xv = rng.normal(60, 0, 1, dt);
      xv[20 + 7] = kNaN;
      x.fill(xv);
      y.poison();
      rstd.poison();
      REQUIRE((rms ? xvk_rms_norm_forward(ctx, x.dl(), nullptr, nullptr, y.dl(), rstd.dl())
                   : xvk_layer_norm_forward(ctx, x.dl(), nullptr, nullptr, nullptr, y.dl(), nullptr, rstd.dl())) ==
              XVK_SUCCESS);
      const std::vector<float> got = y.read(), r = rstd.read();
      for (int row = 0; row < 3; ++row) {
        CHECK(std::isnan(r[size_t(row)]) == (row == 1));
        for (int j = 0; j < 20; ++j) CHECK(std::isnan(got[size_t(row * 20 + j)]) == (row == 1));
      }
    }
}

// ===========================================================================
// Strided rows (a column slice of a wider matrix), against the oracle
// ===========================================================================

TEST_CASE("strided rows against the oracle") {
  Context ctx;
  Rng rng(6300);
  const int64_t rows = 9, cols = 61, ld = 67;
  for (DType dt : kAllDtypes) {
    INFO(std::string(dtype_name(dt)));
    const std::vector<float> xv = rng.normal(size_t(rows * cols), 0, 1, dt), dyv = rng.normal(size_t(rows * cols), 0, 1, dt);
    Tensor x(ctx, {rows, cols}, dt, {ld, 1}, 16), y(ctx, {rows, cols}, dt, {ld, 1}, 4);
    Tensor dy(ctx, {rows, cols}, dt, {ld + 3, 1}), dx(ctx, {rows, cols}, dt, {ld + 1, 1}, 8);
    x.fill(xv);
    dy.fill(dyv);
    oracle::SoftmaxSpec spec;
    spec.shape = {rows, cols};
    REQUIRE(xvk_softmax_forward(ctx, x.dl(), nullptr, y.dl()) == XVK_SUCCESS);
    const oracle::Expected f = oracle::softmax_forward(spec, xv, false);
    const std::vector<float> yv = y.read();
    CHECK_CLOSE(compare("softmax y", yv, f.ref, f.scale, tolerance(dt)));
    REQUIRE(xvk_softmax_backward(ctx, y.dl(), dy.dl(), nullptr, dx.dl()) == XVK_SUCCESS);
    const oracle::Expected b = oracle::softmax_backward(rows, cols, yv, dyv, 1.0f, false);
    CHECK_CLOSE(compare("softmax dx", dx.read(), b.ref, b.scale, tolerance(dt)));

    Tensor mean(ctx, {rows}, DType::f32), rstd(ctx, {rows}, DType::f32), dgamma(ctx, {cols}, DType::f32);
    y.poison();
    REQUIRE(xvk_layer_norm_forward(ctx, x.dl(), nullptr, nullptr, nullptr, y.dl(), mean.dl(), rstd.dl()) == XVK_SUCCESS);
    oracle::NormSpec ns;
    ns.rows = rows;
    ns.cols = cols;
    ns.dtype = dt;
    const oracle::NormForward nf = oracle::norm_forward(ns, xv, nullptr, nullptr, nullptr);
    CHECK_CLOSE(compare("layer_norm y", y.read(), nf.y.ref, nf.y.scale, tolerance(dt)));
    dx.poison();
    REQUIRE(xvk_layer_norm_backward(ctx, dy.dl(), x.dl(), nullptr, mean.dl(), rstd.dl(), nullptr, dx.dl(), dgamma.dl(),
                                    nullptr) == XVK_SUCCESS);
    const oracle::NormBackward nb = oracle::norm_backward(ns, dyv, xv, nullptr, mean.read(), rstd.read());
    CHECK_CLOSE(compare("layer_norm dx", dx.read(), nb.dx.ref, nb.dx.scale, tolerance(dt)));
    CHECK_CLOSE(compare("layer_norm dgamma", dgamma.read(), nb.dgamma.ref, nb.dgamma.scale, tolerance(DType::f32)));
  }
}

// ===========================================================================
// Backwards against central finite differences of the forward
//
// The forward is evaluated in double (the formulas of the header, written
// out below) on the fp32 inputs; the backward is the CPU backend's, on fp32
// tensors. Error budget: the backend's fp32 outputs and the fp32 statistics
// it is given are within a few 2^-24 relative of exact, magnified at most by
// the row sums (rows of <= 12 elements here): ~1e-6 of the largest
// gradient. Central differences with step h = 1e-4 err by h^2/6 times the
// third derivative (O(1) on this data, with epsilon 1e-3 keeping rstd
// tame) plus 1e-16/h of round-off: ~1e-8. We allow 2e-5 of the largest
// gradient (plus 2e-6 absolute): far above both, far below what a wrong
// formula (a missing term, a sign, the scale, 1+gamma) gets wrong.
// ===========================================================================

namespace {

constexpr double kStep = 1e-4;

double fd_tolerance(const std::vector<double> &fd) {
  double m = 0;
  for (double v : fd) m = std::max(m, std::fabs(v));
  return 2e-5 * m + 2e-6;
}

void check_gradient(const char *what, const std::vector<float> &got, const std::vector<double> &fd) {
  REQUIRE(got.size() == fd.size());
  const double tol = fd_tolerance(fd);
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < fd.size(); ++i) {
    if (!(std::fabs(double(got[i]) - fd[i]) <= tol)) ++bad;
    if (std::fabs(double(got[i]) - fd[i]) > std::fabs(double(got[worst]) - fd[worst])) worst = i;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << fd.size() << " differ from finite differences; worst ["
                               << worst << "] backend " << got[worst] << " vs " << fd[worst] << " (tolerance " << tol
                               << ")");
}

// Softmax or log-softmax of each row, in double.
std::vector<double> softmax_double(const std::vector<double> &x, int64_t rows, int64_t cols, double scale, bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, scale * x[size_t(r * cols + j)]);
    for (int64_t j = 0; j < cols; ++j) s += std::exp(scale * x[size_t(r * cols + j)] - m);
    for (int64_t j = 0; j < cols; ++j) {
      const double z = scale * x[size_t(r * cols + j)] - m;
      y[size_t(r * cols + j)] = log ? z - std::log(s) : std::exp(z) / s;
    }
  }
  return y;
}

// LayerNorm / RMSNorm of each row, in double.
std::vector<double> norm_double(const std::vector<double> &x, const std::vector<double> &g, const std::vector<double> &b,
                                int64_t rows, int64_t cols, bool rms, bool zero_centered, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double *h = x.data() + r * cols;
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < cols; ++j) mean += h[j];
      mean /= double(cols);
    }
    for (int64_t j = 0; j < cols; ++j) var += (h[j] - mean) * (h[j] - mean);
    var /= double(cols);
    const double rstd = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j)
      y[size_t(r * cols + j)] = (h[j] - mean) * rstd * (g[size_t(j)] + (zero_centered ? 1 : 0)) + b[size_t(j)];
  }
  return y;
}

double dot(const std::vector<double> &a, const std::vector<float> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * double(b[i]);
  return s;
}

std::vector<double> widen(const std::vector<float> &v) { return {v.begin(), v.end()}; }

// d/dv of loss(v) by central differences, one element at a time.
template <class Loss>
std::vector<double> finite_differences(std::vector<double> v, Loss &&loss) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + kStep;
    const double up = loss(v);
    v[i] = keep - kStep;
    const double down = loss(v);
    v[i] = keep;
    out[i] = (up - down) / (2 * kStep);
  }
  return out;
}

}  // namespace

TEST_CASE("softmax backward against finite differences") {
  Context ctx;
  Rng rng(7000);
  const int64_t rows = 3, cols = 7;
  for (bool log : {false, true})
    for (float scale : {1.0f, 1.3f, -0.6f}) {
      INFO((log ? "log_softmax" : "softmax") << std::string(" scale ") << scale);
      const std::vector<float> xv = rng.normal(21, 0, 1), dyv = rng.normal(21, 0, 1);
      Tensor x(ctx, {rows, cols}, DType::f32), y(ctx, {rows, cols}, DType::f32), dy(ctx, {rows, cols}, DType::f32),
          dx(ctx, {rows, cols}, DType::f32);
      x.fill(xv);
      dy.fill(dyv);
      xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
      o.scale = scale;
      REQUIRE((log ? xvk_log_softmax_forward(ctx, x.dl(), &o, y.dl()) : xvk_softmax_forward(ctx, x.dl(), &o, y.dl())) ==
              XVK_SUCCESS);
      REQUIRE((log ? xvk_log_softmax_backward(ctx, y.dl(), dy.dl(), &o, dx.dl())
                   : xvk_softmax_backward(ctx, y.dl(), dy.dl(), &o, dx.dl())) == XVK_SUCCESS);
      const std::vector<double> fd = finite_differences(
          widen(xv), [&](const std::vector<double> &v) { return dot(softmax_double(v, rows, cols, scale, log), dyv); });
      check_gradient("dx", dx.read(), fd);
    }
}

TEST_CASE("norm backward against finite differences") {
  Context ctx;
  Rng rng(7100);
  const double eps = 1e-3;
  struct Shape {
    std::vector<int64_t> shape;
    int nd;
  };
  for (const Shape &sh : {Shape{{3, 6}, 1}, Shape{{2, 3, 4}, 2}, Shape{{4, 1}, 1}})
    for (bool rms : {false, true})
      for (bool zero_centered : {false, true})
        for (bool with_gamma : {false, true}) {
          const int64_t cols = product({sh.shape.end() - sh.nd, sh.shape.end()}), rows = product(sh.shape) / cols;
          INFO((rms ? "rms_norm " : "layer_norm ") << shape_string(sh.shape) << " nd " << sh.nd
                                                   << (zero_centered ? " zero-centered" : "")
                                                   << (with_gamma ? "" : " no gamma"));
          const std::vector<float> xv = rng.normal(size_t(rows * cols), 0.5, 1), dyv = rng.normal(size_t(rows * cols), 0, 1);
          const std::vector<float> gv = with_gamma ? rng.normal(size_t(cols), zero_centered ? 0 : 1, 0.5)
                                                   : std::vector<float>(size_t(cols), zero_centered ? 0.0f : 1.0f);
          const std::vector<float> bv = rms ? std::vector<float>(size_t(cols), 0.0f) : rng.normal(size_t(cols), 0, 0.5);
          const std::vector<int64_t> pshape(sh.shape.end() - sh.nd, sh.shape.end());
          Tensor x(ctx, sh.shape, DType::f32), y(ctx, sh.shape, DType::f32), dy(ctx, sh.shape, DType::f32),
              dx(ctx, sh.shape, DType::f32), g(ctx, pshape, DType::f32), b(ctx, pshape, DType::f32),
              dg(ctx, pshape, DType::f32), db(ctx, pshape, DType::f32), mean(ctx, {rows}, DType::f32),
              rstd(ctx, {rows}, DType::f32);
          x.fill(xv);
          dy.fill(dyv);
          g.fill(gv);
          b.fill(bv);
          const DLTensor *gamma = with_gamma ? g.dl() : nullptr;
          if (rms) {
            xvk_rms_norm_options o = XVK_RMS_NORM_OPTIONS_INIT;
            o.epsilon = float(eps);
            o.normalized_ndim = sh.nd;
            o.zero_centered_gamma = zero_centered;
            REQUIRE(xvk_rms_norm_forward(ctx, x.dl(), gamma, &o, y.dl(), rstd.dl()) == XVK_SUCCESS);
            REQUIRE(xvk_rms_norm_backward(ctx, dy.dl(), x.dl(), gamma, rstd.dl(), &o, dx.dl(), dg.dl()) == XVK_SUCCESS);
          } else {
            xvk_layer_norm_options o = XVK_LAYER_NORM_OPTIONS_INIT;
            o.epsilon = float(eps);
            o.normalized_ndim = sh.nd;
            o.zero_centered_gamma = zero_centered;
            REQUIRE(xvk_layer_norm_forward(ctx, x.dl(), gamma, b.dl(), &o, y.dl(), mean.dl(), rstd.dl()) == XVK_SUCCESS);
            REQUIRE(xvk_layer_norm_backward(ctx, dy.dl(), x.dl(), gamma, mean.dl(), rstd.dl(), &o, dx.dl(), dg.dl(),
                                            db.dl()) == XVK_SUCCESS);
          }
          // Absent gamma: the forward uses 1 whatever zero_centered says.
          const bool zc = zero_centered && with_gamma;
          const std::vector<float> gf = with_gamma ? gv : std::vector<float>(size_t(cols), 1.0f);
          const double e32 = double(float(eps));
          auto loss_x = [&](const std::vector<double> &v) {
            return dot(norm_double(v, widen(gf), widen(bv), rows, cols, rms, zc, e32), dyv);
          };
          auto loss_g = [&](const std::vector<double> &v) {
            return dot(norm_double(widen(xv), v, widen(bv), rows, cols, rms, zc, e32), dyv);
          };
          auto loss_b = [&](const std::vector<double> &v) {
            return dot(norm_double(widen(xv), widen(gf), v, rows, cols, rms, zc, e32), dyv);
          };
          check_gradient("dx", dx.read(), finite_differences(widen(xv), loss_x));
          // dgamma is the gradient with respect to the gamma given (the same for
          // zero-centered gamma, whose effective scale is 1 + gamma).
          check_gradient("dgamma", dg.read(), finite_differences(widen(gf), loss_g));
          if (!rms) check_gradient("dbeta", db.read(), finite_differences(widen(bv), loss_b));
        }
}

// ===========================================================================
// Determinism of the reductions over rows
// ===========================================================================

TEST_CASE("norm backward dgamma and dbeta are bitwise deterministic") {
  Context ctx;
  Rng rng(8000);
  for (bool rms : {false, true})
    for (DType dt : {DType::f32, DType::f16}) {
      INFO((std::string(rms ? "rms_norm " : "layer_norm ") + dtype_name(dt)));
      const int64_t rows = 1003, cols = 257;
      Tensor x(ctx, {rows, cols}, dt), dy(ctx, {rows, cols}, dt), g(ctx, {cols}, DType::f32),
          mean(ctx, {rows}, DType::f32), rstd(ctx, {rows}, DType::f32), y(ctx, {rows, cols}, dt);
      x.fill(rng.normal(size_t(rows * cols), 0.3, 1.7, dt));
      dy.fill(rng.normal(size_t(rows * cols), 0, 1, dt));
      g.fill(rng.normal(size_t(cols), 1, 0.5));
      REQUIRE((rms ? xvk_rms_norm_forward(ctx, x.dl(), g.dl(), nullptr, y.dl(), rstd.dl())
                   : xvk_layer_norm_forward(ctx, x.dl(), g.dl(), nullptr, nullptr, y.dl(), mean.dl(), rstd.dl())) ==
              XVK_SUCCESS);
      Bytes first[3];
      for (int run = 0; run < 3; ++run) {
        Tensor dx(ctx, {rows, cols}, dt), dg(ctx, {cols}, DType::f32), db(ctx, {cols}, DType::f32);
        REQUIRE((rms ? xvk_rms_norm_backward(ctx, dy.dl(), x.dl(), g.dl(), rstd.dl(), nullptr, dx.dl(), dg.dl())
                     : xvk_layer_norm_backward(ctx, dy.dl(), x.dl(), g.dl(), mean.dl(), rstd.dl(), nullptr, dx.dl(),
                                               dg.dl(), db.dl())) == XVK_SUCCESS);
        const Bytes now[3] = {dx.snapshot(), dg.snapshot(), db.snapshot()};
        CHECK(dg.read()[0] == dg.read()[0]);  // written: not the NaN poison
        if (run == 0) {
          for (int k = 0; k < 3; ++k) first[k] = now[k];
        } else {
          CHECK_MESSAGE(now[0] == first[0], "dx differs between runs");
          CHECK_MESSAGE(now[1] == first[1], "dgamma differs between runs");
          CHECK_MESSAGE(now[2] == first[2], "dbeta differs between runs");
        }
      }
    }
}

// ===========================================================================
// The tolerance tells a careful fp32 LayerNorm from sum-of-squares variance
//
// On rows with mean 1e4 and std 1e-2, var = E[x^2] - E[x]^2 in fp32 cancels
// catastrophically (x^2 ~ 1e8 has an ulp of 8, var is 1e-4). Two fp32
// implementations are compared with the oracle exactly as the backends are:
// the naive one must be rejected, a careful one (two passes, pairwise sums,
// as a GPU block reduction does them) must be accepted. This keeps the
// tolerance honest in both directions.
// ===========================================================================

namespace {

float pairwise_sum(const float *v, int64_t n) {
  if (n <= 8) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += v[i];
    return s;
  }
  return pairwise_sum(v, n / 2) + pairwise_sum(v + n / 2, n - n / 2);
}

// y, mean, rstd of each row, all in fp32.
void layer_norm_fp32(const std::vector<float> &x, int64_t rows, int64_t cols, float eps, bool naive,
                     std::vector<float> &y, std::vector<float> &mean, std::vector<float> &rstd) {
  y.assign(x.size(), 0.0f);
  mean.assign(size_t(rows), 0.0f);
  rstd.assign(size_t(rows), 0.0f);
  std::vector<float> t(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float *h = x.data() + r * cols;
    float m, var;
    if (naive) {
      float s = 0, ss = 0;
      for (int64_t j = 0; j < cols; ++j) {
        s += h[j];
        ss += h[j] * h[j];
      }
      m = s / float(cols);
      var = ss / float(cols) - m * m;
    } else {
      m = pairwise_sum(h, cols) / float(cols);
      for (int64_t j = 0; j < cols; ++j) t[size_t(j)] = (h[j] - m) * (h[j] - m);
      var = pairwise_sum(t.data(), cols) / float(cols);
    }
    const float rs = 1.0f / std::sqrt(var + eps);
    mean[size_t(r)] = m;
    rstd[size_t(r)] = rs;
    for (int64_t j = 0; j < cols; ++j) y[size_t(r * cols + j)] = (h[j] - m) * rs;
  }
}

}  // namespace

TEST_CASE("the tolerance rejects sum-of-squares variance on offset rows") {
  Context ctx;
  Rng rng(9000);
  for (int64_t cols : {64, 761, 4096, 32768}) {
    const int64_t rows = 3;
    INFO("cols " << cols);
    const std::vector<float> x = rng.normal(size_t(rows * cols), 1e4, 1e-2);
    oracle::NormSpec spec;
    spec.rows = rows;
    spec.cols = cols;
    const oracle::NormForward e = oracle::norm_forward(spec, x, nullptr, nullptr, nullptr);
    const Tolerance tol = tolerance(DType::f32);
    for (bool naive : {false, true}) {
      std::vector<float> y, mean, rstd;
      layer_norm_fp32(x, rows, cols, spec.epsilon, naive, y, mean, rstd);
      const Comparison cy = compare("y", y, e.y.ref, e.y.scale, tol);
      const Comparison cs = compare("rstd", rstd, e.rstd.ref, e.rstd.scale, tol);
      const Comparison cm = compare("mean", mean, e.mean.ref, e.mean.scale, tol);
      if (naive) {
        CHECK_MESSAGE(!cy.ok, "naive fp32 variance passed: " << cy.message());
        CHECK_MESSAGE(!cs.ok, "naive fp32 variance passed: " << cs.message());
      } else {
        CHECK_CLOSE(cy);
        CHECK_CLOSE(cs);
        CHECK_CLOSE(cm);
      }
    }
    // And the CPU backend passes by a wide margin.
    NormCase c;
    c.shape = {rows, cols};
    c.gamma = c.beta = false;
    const NormOutputs got = run_norm_forward(ctx, c, NormInputs{x, {}, {}, {}});
    CHECK_CLOSE(compare("backend y", got.y, e.y.ref, e.y.scale, Tolerance{tol.out, tol.acc / 1024, tol.tiny}));
    CHECK_CLOSE(compare("backend rstd", got.rstd, e.rstd.ref, {}, tol));
  }
}
