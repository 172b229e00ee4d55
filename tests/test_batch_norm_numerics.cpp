// BatchNorm on the CPU backend against the float64 oracle of tests/oracle.cpp
// (batch_norm_forward / batch_norm_backward: written from the formulas of
// include/xvk/xvk.h, sharing no code with src/cpu).
//
// Covered: training forward (y, saved_mean, saved_rstd, the running
// statistics' momentum update with the unbiased variance), inference forward,
// backward (dx, dz, dgamma, dbeta); fp32, fp16 and bf16 activations (the
// parameters and statistics are always fp32); activation NONE and RELU, with
// and without z (Add+ReLU), gamma/beta present and absent; every memory order
// the contract names: channels-first (NCHW, strides NULL or explicit),
// channels-last (an (N, C, ...) tensor with PyTorch's channels_last strides,
// and an (N, ..., C) tensor with channel_axis -1 or ndim - 1), on (N, C),
// (N, C, L), (N, C, H, W) and (N, C, D, H, W) shapes with odd and prime sizes,
// C = 1, 3, 5, 7..., H * W = 1, N = 1; the ReLU bitmask bit by bit; the
// backward reading the mask or y; in-place calls; offset data (mean 1e4,
// std 1e-2) with a demonstration that the tolerance rejects sum-of-squares
// variance; finite differences (which validate the oracle itself); bitwise
// determinism of dgamma/dbeta. Data is random and never zero; every output
// is poisoned with NaN (the mask with all-ones words) before each call, so an
// unwritten element fails; a guard after each output must stay untouched.
//
// Tolerances are test_support.hpp's (tolerance(dtype): out, acc, tiny), with
// per-element scales from the oracle; fp32 parameters and statistics use
// tolerance(f32). BatchNorm needs none of its own.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "test_support.hpp"

using namespace xvk_test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Bytes after each output tensor that no call may write.
constexpr uint64_t kGuard = 64;

#define CHECK_CLOSE(comparison)         \
  do {                                  \
    const Comparison c_ = (comparison); \
    CHECK_MESSAGE(c_.ok, c_.message()); \
  } while (0)

std::vector<double> widen(const std::vector<float> &v) { return {v.begin(), v.end()}; }

// Bitwise equality of two float vectors (NaN == NaN when the bits agree).
bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// ---------------------------------------------------------------------------
// Memory orders
//
// The suite and the oracle keep values in (n, c, s) order: element (batch i,
// channel ch, spatial position j) at k = (i * c + ch) * s + j. A Layout maps
// k to the tensor's row-major logical order (what Tensor::fill/read use) and
// to the element's position in memory (the mask's bit index).
// ---------------------------------------------------------------------------

enum class Order {
  cf_null,       // (N, C, spatial...), strides NULL
  cf_strides,    // (N, C, spatial...), explicit contiguous strides
  cl_torch,      // (N, C, spatial...), PyTorch channels_last strides: C is innermost
  nhwc_null,     // (N, spatial..., C), strides NULL, channel_axis -1
  nhwc_strides,  // (N, spatial..., C), explicit contiguous strides, channel_axis ndim - 1
};
constexpr Order kAllOrders[] = {Order::cf_null, Order::cf_strides, Order::cl_torch, Order::nhwc_null,
                                Order::nhwc_strides};

const char *order_name(Order o) {
  switch (o) {
    case Order::cf_null: return "channels-first (strides NULL)";
    case Order::cf_strides: return "channels-first (explicit strides)";
    case Order::cl_torch: return "channels_last strides on (N, C, ...)";
    case Order::nhwc_null: return "(N, ..., C) channel_axis -1";
    case Order::nhwc_strides: return "(N, ..., C) explicit strides, channel_axis ndim-1";
  }
  return "?";
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int k = int(shape.size()) - 2; k >= 0; --k) st[size_t(k)] = st[size_t(k) + 1] * shape[size_t(k) + 1];
  return st;
}

struct Layout {
  std::vector<int64_t> dims;  // logical (N, C, spatial...)
  Order order = Order::cf_null;
  int64_t n = 0, c = 0, s = 1;

  Layout() = default;
  Layout(std::vector<int64_t> d, Order o) : dims(std::move(d)), order(o) {
    n = dims[0];
    c = dims[1];
    for (size_t k = 2; k < dims.size(); ++k) s *= dims[k];
  }
  int ndim() const { return int(dims.size()); }
  bool nhwc() const { return order == Order::nhwc_null || order == Order::nhwc_strides; }
  bool channels_last() const { return order == Order::cl_torch || nhwc(); }
  int64_t numel() const { return n * c * s; }
  int64_t words() const { return (numel() + 31) / 32; }

  // The tensor's shape.
  std::vector<int64_t> shape() const {
    if (!nhwc()) return dims;
    std::vector<int64_t> sh = {n};
    sh.insert(sh.end(), dims.begin() + 2, dims.end());
    sh.push_back(c);
    return sh;
  }
  // Its strides (empty: NULL).
  std::vector<int64_t> strides() const {
    switch (order) {
      case Order::cf_strides:
      case Order::nhwc_strides: return row_major_strides(shape());
      case Order::cl_torch: {
        std::vector<int64_t> st(dims.size(), 1);
        int64_t step = c;
        for (int k = ndim() - 1; k >= 2; --k) st[size_t(k)] = step, step *= dims[size_t(k)];
        st[0] = step;  // s * c
        return st;
      }
      default: return {};
    }
  }
  int32_t channel_axis() const {
    if (order == Order::nhwc_null) return -1;
    if (order == Order::nhwc_strides) return ndim() - 1;
    return 1;
  }
  // k = (i * c + ch) * s + j in the tensor's row-major logical order.
  int64_t logical(int64_t k) const {
    if (!nhwc()) return k;
    const int64_t i = k / (c * s), ch = (k / s) % c, j = k % s;
    return (i * s + j) * c + ch;
  }
  // k's position in memory.
  int64_t memory(int64_t k) const {
    if (!channels_last()) return k;
    const int64_t i = k / (c * s), ch = (k / s) % c, j = k % s;
    return (i * s + j) * c + ch;
  }
  std::vector<float> to_tensor(const std::vector<float> &v) const {
    std::vector<float> out(v.size());
    for (int64_t k = 0; k < int64_t(v.size()); ++k) out[size_t(logical(k))] = v[size_t(k)];
    return out;
  }
  std::vector<float> from_tensor(const std::vector<float> &v) const {
    std::vector<float> out(v.size());
    for (int64_t k = 0; k < int64_t(v.size()); ++k) out[size_t(k)] = v[size_t(logical(k))];
    return out;
  }
  std::string text() const { return shape_string(dims) + " " + order_name(order); }
};

// Shapes (logical N, C, spatial...): (N, C), 1-D, 2-D and 3-D spatial; odd
// sizes and primes; C not a multiple of 4 and C = 1; H * W = 1; N = 1 with
// s > 1; a few powers of two; element counts on and off multiples of 32.
const std::vector<std::vector<int64_t>> &shapes() {
  static const std::vector<std::vector<int64_t>> all = {
      {5, 3},        {2, 7},        {33, 5},          {16, 8},       {257, 3},     {4, 8},
      {3, 5, 7},     {1, 3, 11},    {2, 6, 1},        {4, 7, 61},    {2, 1, 16},   {2, 3, 4, 5},
      {1, 7, 3, 3},  {3, 5, 1, 1},  {5, 1, 3, 2},     {2, 16, 7, 9}, {3, 13, 11, 7}, {4, 4, 1, 13},
      {8, 32, 9, 9}, {2, 3, 2, 3, 4}, {1, 5, 3, 1, 7}, {2, 4, 3, 5, 2}};
  return all;
}

// ---------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------

struct Data {
  double mean, std;
  const char *name;
};

const Data kNormal{0.0, 1.0, "N(0, 1)"};

// A large offset relative to the spread, per dtype (the offset must be
// representable and the spread above its ulp there), as in
// test_cpu_numerics.cpp.
Data offset_data(DType dt) {
  switch (dt) {
    case DType::f16: return {3000.0, 4.0, "mean 3000 std 4"};
    case DType::bf16: return {1000.0, 30.0, "mean 1000 std 30"};
    default: return {1e4, 1e-2, "mean 1e4 std 1e-2"};
  }
}

// (n, c, s)-ordered values: each channel its own mean (data.mean +- 2 std)
// and spread (0.5 to 2 std), rounded to dt, never zero.
std::vector<float> channel_data(Rng &rng, int64_t n, int64_t c, int64_t s, const Data &d, DType dt) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> out(size_t(n * c * s));
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = d.mean + d.std * (4 * u(rng.engine()) - 2), sd = d.std * (0.5 + 1.5 * u(rng.engine()));
    std::normal_distribution<double> dist(mu, sd);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        float v;
        do v = round_to(dt, float(dist(rng.engine())));
        while (v == 0.0f);
        out[size_t((i * c + ch) * s + j)] = v;
      }
  }
  return out;
}

// Per-channel sample mean and biased variance (double), for running
// statistics near the data's.
void channel_moments(const std::vector<float> &x, int64_t n, int64_t c, int64_t s, std::vector<double> &mean,
                     std::vector<double> &var) {
  mean.assign(size_t(c), 0.0);
  var.assign(size_t(c), 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += x[size_t((i * c + ch) * s + j)];
    const double mu = sum / double(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sq += (x[size_t((i * c + ch) * s + j)] - mu) * (x[size_t((i * c + ch) * s + j)] - mu);
    mean[size_t(ch)] = mu;
    var[size_t(ch)] = sq / double(n * s);
  }
}

// Every input of a case, in (n, c, s) order, as stored.
struct Inputs {
  std::vector<float> x, z, gamma, beta, running_mean, running_var, dy;
};

Inputs make_inputs(Rng &rng, const Layout &l, DType dt, const Data &data, bool training) {
  Inputs in;
  const size_t c = size_t(l.c), numel = size_t(l.numel());
  in.x = channel_data(rng, l.n, l.c, l.s, data, dt);
  in.z = rng.normal(numel, 0.0, 1.0, dt);
  in.gamma = rng.normal(c, 1.0, 0.5);
  in.beta = rng.normal(c, 0.0, 0.5);
  in.dy = rng.normal(numel, 0.0, 1.0, dt);
  if (training) {  // the old running statistics: anything
    in.running_mean = rng.normal(c, 0.0, 1.0);
    in.running_var = rng.uniform(c, 0.5, 2.0);
  } else {  // near the data's, so that y is O(1)
    std::vector<double> mean, var;
    channel_moments(in.x, l.n, l.c, l.s, mean, var);
    const std::vector<float> noise = rng.normal(c, 0.0, 0.3), factor = rng.uniform(c, 0.5, 2.0);
    in.running_mean.resize(c);
    in.running_var.resize(c);
    for (size_t ch = 0; ch < c; ++ch) {
      in.running_mean[ch] = float(mean[ch] + noise[ch] * std::sqrt(var[ch]));
      in.running_var[ch] = float(var[ch] * factor[ch]);
      if (in.running_var[ch] == 0.0f) in.running_var[ch] = 1.0f;
    }
  }
  return in;
}

// ---------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------

// An activation-shaped tensor in the layout, with a guard after it.
std::unique_ptr<Tensor> activation(xvk_context *ctx, const Layout &l, DType dt) {
  return std::make_unique<Tensor>(ctx, l.shape(), dt, l.strides(), 0, kGuard);
}

// A float32 per-channel vector: {C}, or {1, C, 1} ("any shape of C elements").
std::unique_ptr<Tensor> channel_vector(xvk_context *ctx, int64_t c, bool shaped) {
  return std::make_unique<Tensor>(ctx, shaped ? std::vector<int64_t>{1, c, 1} : std::vector<int64_t>{c}, DType::f32,
                                  std::vector<int64_t>{}, 0, kGuard);
}

// The ReLU mask: 32-bit words, allocated as float32 (Tensor's 4-byte dtype)
// and handed to xvk as uint32 (or int32). Poisoned with all-ones words, so
// that an unwritten word or tail bit reads as 1.
class Mask {
 public:
  Mask(xvk_context *ctx, int64_t words, bool int32)
      : t_(ctx, {words}, DType::f32, {}, 0, kGuard), desc_(t_.desc()) {
    desc_.t().dtype = int32 ? DLDataType{kDLInt, 32, 1} : DLDataType{kDLUInt, 32, 1};
    poison();
  }
  void poison() {
    t_.restore(Bytes(t_.bytes(), 0xFF));
    before_ = t_.snapshot();
  }
  DLTensor *dl() { return desc_.get(); }
  std::vector<uint32_t> words() const {
    const Bytes b = t_.snapshot();
    std::vector<uint32_t> w(size_t(t_.numel()));
    std::memcpy(w.data(), b.data() + t_.dl()->byte_offset, w.size() * 4);
    return w;
  }
  bool guard_intact() const { return t_.gaps_unchanged(before_); }

 private:
  Tensor t_;
  TensorDesc desc_;
  Bytes before_;
};

void check_guard(const char *what, const Tensor &t, const Bytes &before) {
  const std::string message = std::string(what) + " was written outside its elements";
  CHECK_MESSAGE(t.gaps_unchanged(before), message);
}

// ---------------------------------------------------------------------------
// The mask against the oracle
//
// Bit p (the element's position in memory) must be:
//  - exactly the backend's own y > 0, as stored (no tolerance: the contract
//    defines the mask by the stored y);
//  - the oracle's y > 0 (of y rounded to the dtype), except where the
//    oracle's pre-activation v is within the dtype tolerance of 0: there a
//    correct backend, whose v is off by up to that much, may round to the
//    other side of zero. Such "ambiguous" mismatches are counted and limited
//    to 1% of the elements (+1): on this data only a vanishing fraction of v
//    lies that close to 0, so more means a wrong mask, not rounding (the CPU
//    backend, in float64, has none);
//  - 0 past the last element (up to the end of the last word).
// ---------------------------------------------------------------------------

void check_mask(const Layout &l, DType dt, const std::vector<uint32_t> &words, const std::vector<float> &y_got,
                const oracle::BatchNormForward &e) {
  REQUIRE(int64_t(words.size()) == l.words());
  const Tolerance tol = tolerance(dt);
  const int64_t numel = l.numel();
  auto bit = [&](int64_t p) { return ((words[size_t(p / 32)] >> (p % 32)) & 1u) != 0; };
  int64_t inconsistent = 0, wrong = 0, ambiguous = 0, tail = 0, first_wrong = -1, first_inconsistent = -1;
  for (int64_t k = 0; k < numel; ++k) {
    const bool b = bit(l.memory(k));
    if (b != (y_got[size_t(k)] > 0.0f) && inconsistent++ == 0) first_inconsistent = k;
    if (b != e.positive[size_t(k)]) {
      const double v = e.pre.ref[size_t(k)];
      const double allowed = tol.out * std::fabs(v) + tol.acc * e.pre.scale[size_t(k)] + tol.tiny;
      if (std::fabs(v) <= allowed) ++ambiguous;
      else if (wrong++ == 0) first_wrong = k;
    }
  }
  for (int64_t p = numel; p < l.words() * 32; ++p) tail += bit(p);
  CHECK_MESSAGE(inconsistent == 0, "mask: " << inconsistent << " of " << numel
                                            << " bits differ from the backend's own y > 0; first at (n, c, s) index "
                                            << first_inconsistent);
  CHECK_MESSAGE(wrong == 0, "mask: " << wrong << " of " << numel << " bits differ from the oracle's y > 0; first at "
                                     << first_wrong << " (memory position "
                                     << (first_wrong >= 0 ? l.memory(first_wrong) : -1) << "), v = "
                                     << (first_wrong >= 0 ? e.pre.ref[size_t(first_wrong)] : 0.0));
  CHECK_MESSAGE(ambiguous <= numel / 100 + 1,
                "mask: " << ambiguous << " near-zero mismatches (within tolerance) of " << numel);
  CHECK_MESSAGE(tail == 0, "mask: " << tail << " bits set past the last element");
}

// xvk_batch_norm_mask_words: ceil(numel / 32), from the shape alone.
void check_mask_words(const Tensor &x, const Layout &l) {
  TensorDesc d = x.desc();
  d.t().data = nullptr;
  int64_t words = -1;
  REQUIRE(xvk_batch_norm_mask_words(d.get(), &words) == XVK_SUCCESS);
  CHECK(words == l.words());
}

// ---------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------

enum class FwdInPlace { none, y_is_x, y_is_z };

struct FwdCase {
  DType dt = DType::f32;
  Layout layout;
  bool training = true, relu = false, z = false, gamma = true, beta = true, mask = false;
  bool running = true;  // training: update the running statistics (inference always reads them)
  bool saved = true;    // training: write saved_mean and saved_rstd
  float epsilon = 1e-5f, momentum = 0.1f;
  bool null_options = false;  // options == NULL (then the rest must be the defaults)
  bool shaped_params = false, mask_int32 = false;
  FwdInPlace inplace = FwdInPlace::none;
  Data data = kNormal;

  std::string text() const {
    std::string t = std::string(training ? "training " : "inference ") + dtype_name(dt) + " " + layout.text() +
                    " data " + data.name + (relu ? " relu" : "") + (z ? " z" : "") + (gamma ? "" : " no-gamma") +
                    (beta ? "" : " no-beta") + (mask ? " mask" : "") + (mask_int32 ? "(int32)" : "") +
                    " eps " + std::to_string(epsilon) + " momentum " + std::to_string(momentum);
    if (training) t += std::string(running ? " running" : " no-running") + (saved ? " saved" : " no-saved");
    if (null_options) t += " options=NULL";
    if (shaped_params) t += " params{1,C,1}";
    if (inplace == FwdInPlace::y_is_x) t += " y=x";
    if (inplace == FwdInPlace::y_is_z) t += " y=z";
    return t;
  }
};

struct FwdResult {
  std::vector<float> y, saved_mean, saved_rstd, running_mean, running_var;  // y in (n, c, s) order
  std::vector<uint32_t> mask;
};

xvk_batch_norm_options options_of(const Layout &l, bool relu, float epsilon, float momentum) {
  xvk_batch_norm_options o = XVK_BATCH_NORM_OPTIONS_INIT;
  o.epsilon = epsilon;
  o.momentum = momentum;
  o.activation = relu ? XVK_ACTIVATION_RELU : XVK_ACTIVATION_NONE;
  o.channel_axis = l.channel_axis();
  return o;
}

// Runs the forward on the CPU backend: poisons the outputs, checks that the
// inputs and the bytes around the outputs are untouched.
FwdResult run_forward(xvk_context *ctx, const FwdCase &c, const Inputs &in) {
  const Layout &l = c.layout;
  auto x = activation(ctx, l, c.dt), z = activation(ctx, l, c.dt), y = activation(ctx, l, c.dt);
  auto gamma = channel_vector(ctx, l.c, c.shaped_params), beta = channel_vector(ctx, l.c, c.shaped_params);
  auto rm = channel_vector(ctx, l.c, c.shaped_params), rv = channel_vector(ctx, l.c, c.shaped_params);
  auto sm = channel_vector(ctx, l.c, c.shaped_params), sr = channel_vector(ctx, l.c, c.shaped_params);
  Mask mask(ctx, l.words(), c.mask_int32);
  x->fill(l.to_tensor(in.x));
  z->fill(l.to_tensor(in.z));
  gamma->fill(in.gamma);
  beta->fill(in.beta);
  rm->fill(in.running_mean);
  rv->fill(in.running_var);
  for (Tensor *t : {y.get(), sm.get(), sr.get()}) t->poison();
  mask.poison();
  check_mask_words(*x, l);

  Tensor *out = c.inplace == FwdInPlace::y_is_x ? x.get() : c.inplace == FwdInPlace::y_is_z ? z.get() : y.get();
  const Bytes x0 = x->snapshot(), z0 = z->snapshot(), g0 = gamma->snapshot(), b0 = beta->snapshot(),
              rm0 = rm->snapshot(), rv0 = rv->snapshot(), y0 = out->snapshot(), sm0 = sm->snapshot(),
              sr0 = sr->snapshot();
  const xvk_batch_norm_options o = options_of(l, c.relu, c.epsilon, c.momentum);
  const xvk_batch_norm_options *op = c.null_options ? nullptr : &o;
  const DLTensor *zt = c.z ? z->dl() : nullptr, *gt = c.gamma ? gamma->dl() : nullptr,
                 *bt = c.beta ? beta->dl() : nullptr;
  DLTensor *mt = c.mask ? mask.dl() : nullptr;
  const xvk_status_t s =
      c.training ? xvk_batch_norm_forward_training(ctx, x->dl(), zt, gt, bt, op, out->dl(), mt,
                                                   c.running ? rm->dl() : nullptr, c.running ? rv->dl() : nullptr,
                                                   c.saved ? sm->dl() : nullptr, c.saved ? sr->dl() : nullptr)
                 : xvk_batch_norm_forward_inference(ctx, x->dl(), zt, gt, bt, rm->dl(), rv->dl(), op, out->dl(), mt);
  REQUIRE_MESSAGE(s == XVK_SUCCESS, xvk_last_error_message());

  FwdResult r;
  r.y = l.from_tensor(out->read());
  check_guard("y", *out, y0);
  if (c.inplace != FwdInPlace::y_is_x) CHECK_MESSAGE(x->snapshot() == x0, "x was written");
  if (c.inplace != FwdInPlace::y_is_z) CHECK_MESSAGE(z->snapshot() == z0, "z was written");
  CHECK_MESSAGE(gamma->snapshot() == g0, "gamma was written");
  CHECK_MESSAGE(beta->snapshot() == b0, "beta was written");
  if (c.training && c.running) {
    r.running_mean = rm->read();
    r.running_var = rv->read();
    check_guard("running_mean", *rm, rm0);
    check_guard("running_var", *rv, rv0);
  } else {
    CHECK_MESSAGE(rm->snapshot() == rm0, "running_mean was written");
    CHECK_MESSAGE(rv->snapshot() == rv0, "running_var was written");
  }
  if (c.training && c.saved) {
    r.saved_mean = sm->read();
    r.saved_rstd = sr->read();
    check_guard("saved_mean", *sm, sm0);
    check_guard("saved_rstd", *sr, sr0);
  } else {
    CHECK_MESSAGE(sm->snapshot() == sm0, "saved_mean was written");
    CHECK_MESSAGE(sr->snapshot() == sr0, "saved_rstd was written");
  }
  if (c.mask) {
    r.mask = mask.words();
    CHECK_MESSAGE(mask.guard_intact(), "mask was written past its last word");
  }
  return r;
}

oracle::BatchNormSpec spec_of(const Layout &l, DType dt, bool relu, float epsilon, float momentum) {
  oracle::BatchNormSpec s;
  s.n = l.n;
  s.c = l.c;
  s.s = l.s;
  s.epsilon = epsilon;
  s.momentum = momentum;
  s.relu = relu;
  s.dtype = dt;
  return s;
}

oracle::BatchNormForward oracle_forward(const FwdCase &c, const Inputs &in) {
  const std::vector<double> x = widen(in.x), z = widen(in.z), g = widen(in.gamma), b = widen(in.beta),
                            rm = widen(in.running_mean), rv = widen(in.running_var);
  const bool running = !c.training || c.running;
  return oracle::batch_norm_forward(spec_of(c.layout, c.dt, c.relu, c.epsilon, c.momentum), c.training, x,
                                    c.z ? &z : nullptr, c.gamma ? &g : nullptr, c.beta ? &b : nullptr,
                                    running ? &rm : nullptr, running ? &rv : nullptr);
}

void forward_case(xvk_context *ctx, Rng &rng, const FwdCase &c) {
  INFO(c.text());
  const Inputs in = make_inputs(rng, c.layout, c.dt, c.data, c.training);
  const FwdResult got = run_forward(ctx, c, in);
  const oracle::BatchNormForward e = oracle_forward(c, in);
  const Tolerance t32 = tolerance(DType::f32);
  CHECK_CLOSE(compare("y", got.y, e.y.ref, e.y.scale, tolerance(c.dt)));
  if (c.training && c.saved) {
    CHECK_CLOSE(compare("saved_mean", got.saved_mean, e.mean.ref, e.mean.scale, t32));
    CHECK_CLOSE(compare("saved_rstd", got.saved_rstd, e.rstd.ref, e.rstd.scale, t32));
  }
  if (c.training && c.running) {
    CHECK_CLOSE(compare("running_mean", got.running_mean, e.running_mean.ref, e.running_mean.scale, t32));
    CHECK_CLOSE(compare("running_var", got.running_var, e.running_var.ref, e.running_var.scale, t32));
  }
  if (c.mask) check_mask(c.layout, c.dt, got.mask, got.y, e);
}

// The options visited in turn as the shapes and orders go by.
FwdCase forward_config(DType dt, bool training, const Layout &l, size_t k) {
  static const float momenta[] = {0.1f, 0.0f, 1.0f, 0.37f, 0.9f};
  FwdCase c;
  c.dt = dt;
  c.training = training;
  c.layout = l;
  c.relu = k % 2 == 1;
  c.z = k % 3 == 0;
  c.gamma = k % 5 != 3;
  c.beta = k % 4 != 2;
  c.mask = c.relu && k % 7 != 5;
  c.running = k % 6 != 4;
  c.saved = k % 9 != 1;
  c.epsilon = k % 4 == 3 ? 1e-3f : 1e-5f;
  c.momentum = momenta[(k / 3) % 5];
  c.shaped_params = k % 8 == 6;
  c.mask_int32 = k % 3 == 1;
  if (k % 11 == 4 && l.channel_axis() == 1 && !c.relu) {  // the defaults, through options == NULL
    c.null_options = true;
    c.epsilon = 1e-5f;
    c.momentum = 0.1f;
  }
  return c;
}

void check_forward(DType dt, bool training) {
  Context ctx;
  Rng rng(20000 + uint64_t(dt) * 10 + (training ? 1 : 0));
  size_t k = 0;
  for (const auto &dims : shapes())
    for (Order order : kAllOrders)
      for (const Data &data : {kNormal, offset_data(dt)}) {
        FwdCase c = forward_config(dt, training, Layout(dims, order), k++);
        c.data = data;
        forward_case(ctx, rng, c);
      }
}

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------

enum class BwdInPlace { none, dx_is_dy, dx_is_x, dz_is_dy, dx_is_x_dz_is_dy };

struct BwdCase {
  DType dt = DType::f32;
  Layout layout;
  bool relu = false, z = false;  // the forward's activation and residual
  bool gamma = true, dz = true, dgamma = true, dbeta = true;
  bool shaped_params = false, mask_int32 = false, null_options = false;
  BwdInPlace inplace = BwdInPlace::none;
  Data data = kNormal;

  std::string text() const {
    static const char *inplace_names[] = {"", " dx=dy", " dx=x", " dz=dy", " dx=x dz=dy"};
    return std::string("backward ") + dtype_name(dt) + " " + layout.text() + " data " + data.name +
           (relu ? " relu" : "") + (z ? " (forward with z)" : "") + (gamma ? "" : " no-gamma") +
           (dz ? " dz" : "") + (dgamma ? " dgamma" : "") + (dbeta ? " dbeta" : "") +
           (shaped_params ? " params{1,C,1}" : "") + (mask_int32 ? " mask(int32)" : "") +
           (null_options ? " options=NULL" : "") + inplace_names[int(inplace)];
  }
  bool dx_is_dy() const { return inplace == BwdInPlace::dx_is_dy; }
  bool dx_is_x() const { return inplace == BwdInPlace::dx_is_x || inplace == BwdInPlace::dx_is_x_dz_is_dy; }
  bool dz_is_dy() const { return inplace == BwdInPlace::dz_is_dy || inplace == BwdInPlace::dx_is_x_dz_is_dy; }
};

// What the backward is given from the forward (the backend's training forward).
struct Saved {
  std::vector<float> y, mean, rstd;  // y in (n, c, s) order
  std::vector<uint32_t> mask;
};

Saved run_saved_forward(xvk_context *ctx, const BwdCase &c, const Inputs &in) {
  FwdCase f;
  f.dt = c.dt;
  f.layout = c.layout;
  f.relu = c.relu;
  f.z = c.z;
  f.gamma = c.gamma;
  f.mask = c.relu;
  f.running = false;
  const FwdResult r = run_forward(ctx, f, in);
  return {r.y, r.saved_mean, r.saved_rstd, r.mask};
}

enum class Source { none, mask, y };  // where the ReLU backward learns y > 0

struct BwdResult {
  std::vector<float> dx, dz, dgamma, dbeta;  // dx, dz in (n, c, s) order
};

BwdResult run_backward(xvk_context *ctx, const BwdCase &c, const Inputs &in, const Saved &sv, Source src) {
  const Layout &l = c.layout;
  auto dy = activation(ctx, l, c.dt), x = activation(ctx, l, c.dt), y = activation(ctx, l, c.dt);
  auto dx = activation(ctx, l, c.dt), dz = activation(ctx, l, c.dt);
  auto gamma = channel_vector(ctx, l.c, c.shaped_params), sm = channel_vector(ctx, l.c, c.shaped_params),
       sr = channel_vector(ctx, l.c, c.shaped_params), dg = channel_vector(ctx, l.c, c.shaped_params),
       db = channel_vector(ctx, l.c, c.shaped_params);
  dy->fill(l.to_tensor(in.dy));
  x->fill(l.to_tensor(in.x));
  y->fill(l.to_tensor(sv.y));
  gamma->fill(in.gamma);
  sm->fill(sv.mean);
  sr->fill(sv.rstd);
  Tensor *dxt = c.dx_is_dy() ? dy.get() : c.dx_is_x() ? x.get() : dx.get();
  Tensor *dzt = c.dz_is_dy() ? dy.get() : dz.get();
  for (Tensor *t : {dx.get(), dz.get(), dg.get(), db.get()}) t->poison();
  const Bytes dy0 = dy->snapshot(), x0 = x->snapshot(), y0 = y->snapshot(), g0 = gamma->snapshot(),
              sm0 = sm->snapshot(), sr0 = sr->snapshot(), dx0 = dxt->snapshot(), dz0 = dzt->snapshot(),
              dg0 = dg->snapshot(), db0 = db->snapshot();

  // The mask tensor: the forward's words in an otherwise all-ones allocation.
  std::unique_ptr<Tensor> mask_words;
  TensorDesc mask_desc;
  if (src == Source::mask) {
    mask_words = std::make_unique<Tensor>(ctx, std::vector<int64_t>{l.words()}, DType::f32, std::vector<int64_t>{},
                                          0, kGuard);
    Bytes b(mask_words->bytes(), 0xFF);
    std::memcpy(b.data(), sv.mask.data(), sv.mask.size() * 4);
    mask_words->restore(b);
    mask_desc = mask_words->desc();
    mask_desc.t().dtype = c.mask_int32 ? DLDataType{kDLInt, 32, 1} : DLDataType{kDLUInt, 32, 1};
  }
  const Bytes mask0 = mask_words ? mask_words->snapshot() : Bytes{};

  const xvk_batch_norm_options o = options_of(l, c.relu, 1e-5f, 0.1f);
  const xvk_status_t s = xvk_batch_norm_backward(
      ctx, dy->dl(), x->dl(), src == Source::mask ? mask_desc.get() : nullptr, src == Source::y ? y->dl() : nullptr,
      c.gamma ? gamma->dl() : nullptr, sm->dl(), sr->dl(), c.null_options ? nullptr : &o, dxt->dl(),
      c.dz ? dzt->dl() : nullptr, c.dgamma ? dg->dl() : nullptr, c.dbeta ? db->dl() : nullptr);
  REQUIRE_MESSAGE(s == XVK_SUCCESS, xvk_last_error_message());

  BwdResult r;
  r.dx = l.from_tensor(dxt->read());
  check_guard("dx", *dxt, dx0);
  if (c.dz) {
    r.dz = l.from_tensor(dzt->read());
    check_guard("dz", *dzt, dz0);
  } else if (!c.dz_is_dy()) {
    CHECK_MESSAGE(dz->snapshot() == dz0, "dz was written though not given");
  }
  if (c.dgamma) {
    r.dgamma = dg->read();
    check_guard("dgamma", *dg, dg0);
  } else {
    CHECK_MESSAGE(dg->snapshot() == dg0, "dgamma was written though not given");
  }
  if (c.dbeta) {
    r.dbeta = db->read();
    check_guard("dbeta", *db, db0);
  } else {
    CHECK_MESSAGE(db->snapshot() == db0, "dbeta was written though not given");
  }
  if (!c.dx_is_dy() && !(c.dz && c.dz_is_dy())) CHECK_MESSAGE(dy->snapshot() == dy0, "dy was written");
  if (!c.dx_is_x()) CHECK_MESSAGE(x->snapshot() == x0, "x was written");
  CHECK_MESSAGE(y->snapshot() == y0, "y was written");
  CHECK_MESSAGE(gamma->snapshot() == g0, "gamma was written");
  CHECK_MESSAGE(sm->snapshot() == sm0, "saved_mean was written");
  CHECK_MESSAGE(sr->snapshot() == sr0, "saved_rstd was written");
  if (mask_words) CHECK_MESSAGE(mask_words->snapshot() == mask0, "mask was written");
  return r;
}

void backward_case(xvk_context *ctx, Rng &rng, const BwdCase &c) {
  INFO(c.text());
  const Layout &l = c.layout;
  const Inputs in = make_inputs(rng, l, c.dt, c.data, true);
  const Saved sv = run_saved_forward(ctx, c, in);
  // Under ReLU the backward reads the mask or y: both must give bitwise the same.
  const BwdResult got = run_backward(ctx, c, in, sv, c.relu ? Source::mask : Source::none);
  if (c.relu) {
    const BwdResult via_y = run_backward(ctx, c, in, sv, Source::y);
    CHECK_MESSAGE(same_bits(got.dx, via_y.dx), "dx differs between reading the mask and reading y");
    CHECK_MESSAGE(same_bits(got.dz, via_y.dz), "dz differs between reading the mask and reading y");
    CHECK_MESSAGE(same_bits(got.dgamma, via_y.dgamma), "dgamma differs between reading the mask and reading y");
    CHECK_MESSAGE(same_bits(got.dbeta, via_y.dbeta), "dbeta differs between reading the mask and reading y");
  }
  std::vector<bool> positive(sv.y.size());
  for (size_t k = 0; k < sv.y.size(); ++k) positive[k] = sv.y[k] > 0.0f;
  const std::vector<double> dy = widen(in.dy), x = widen(in.x), g = widen(in.gamma), mean = widen(sv.mean),
                            rstd = widen(sv.rstd);
  const oracle::BatchNormBackward e = oracle::batch_norm_backward(spec_of(l, c.dt, c.relu, 1e-5f, 0.1f), dy, x,
                                                                  c.gamma ? &g : nullptr, mean, rstd,
                                                                  c.relu ? &positive : nullptr);
  const Tolerance t32 = tolerance(DType::f32);
  CHECK_CLOSE(compare("dx", got.dx, e.dx.ref, e.dx.scale, tolerance(c.dt)));
  if (c.dz) {
    // dz = g: a copy of dy (or 0 where y <= 0), exactly.
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < got.dz.size(); ++k)
      if (!(double(got.dz[k]) == e.dz.ref[k]) && bad++ == 0) first = k;
    CHECK_MESSAGE(bad == 0, "dz: " << bad << " of " << got.dz.size() << " elements are not dy (or 0); first [" << first
                                   << "]: got " << got.dz[first] << ", expected " << e.dz.ref[first]);
  }
  if (c.dgamma) CHECK_CLOSE(compare("dgamma", got.dgamma, e.dgamma.ref, e.dgamma.scale, t32));
  if (c.dbeta) CHECK_CLOSE(compare("dbeta", got.dbeta, e.dbeta.ref, e.dbeta.scale, t32));
}

BwdCase backward_config(DType dt, const Layout &l, size_t k) {
  BwdCase c;
  c.dt = dt;
  c.layout = l;
  c.relu = k % 2 == 0;
  c.z = k % 3 == 1;
  c.gamma = k % 5 != 2;
  c.dz = k % 4 != 3;
  c.dgamma = k % 7 != 4;
  c.dbeta = k % 6 != 5;
  c.shaped_params = k % 8 == 3;
  c.mask_int32 = k % 3 == 2;
  c.null_options = !c.relu && l.channel_axis() == 1 && k % 5 == 1;
  return c;
}

void check_backward(DType dt) {
  Context ctx;
  Rng rng(30000 + uint64_t(dt));
  size_t k = 0;
  for (const auto &dims : shapes())
    for (Order order : kAllOrders)
      for (const Data &data : {kNormal, offset_data(dt)}) {
        BwdCase c = backward_config(dt, Layout(dims, order), k++);
        c.data = data;
        backward_case(ctx, rng, c);
      }
}

}  // namespace

TEST_CASE("batch_norm training forward f32") { check_forward(DType::f32, true); }
TEST_CASE("batch_norm training forward f16") { check_forward(DType::f16, true); }
TEST_CASE("batch_norm training forward bf16") { check_forward(DType::bf16, true); }
TEST_CASE("batch_norm inference forward f32") { check_forward(DType::f32, false); }
TEST_CASE("batch_norm inference forward f16") { check_forward(DType::f16, false); }
TEST_CASE("batch_norm inference forward bf16") { check_forward(DType::bf16, false); }
TEST_CASE("batch_norm backward f32") { check_backward(DType::f32); }
TEST_CASE("batch_norm backward f16") { check_backward(DType::f16); }
TEST_CASE("batch_norm backward bf16") { check_backward(DType::bf16); }

// Every combination of the forward's options once, on one odd shape, the
// dtypes and memory orders taken in turn.
TEST_CASE("batch_norm forward: every option combination") {
  Context ctx;
  Rng rng(21000);
  size_t k = 0;
  for (bool training : {true, false})
    for (unsigned m = 0; m < 128; ++m) {
      FwdCase c;
      c.training = training;
      c.relu = m & 1;
      c.z = m & 2;
      c.gamma = m & 4;
      c.beta = m & 8;
      c.mask = c.relu && (m & 16);
      if (!c.relu && (m & 16)) continue;  // no mask without ReLU
      c.running = m & 32;
      c.saved = m & 64;
      if (!training && (m & 96)) continue;  // the training-only options
      c.dt = kAllDtypes[k % 3];
      c.layout = Layout({3, 5, 2, 3}, kAllOrders[k % 5]);
      c.mask_int32 = k % 2;
      ++k;
      forward_case(ctx, rng, c);
    }
}

// Every combination of the backward's options once.
TEST_CASE("batch_norm backward: every option combination") {
  Context ctx;
  Rng rng(31000);
  size_t k = 0;
  for (unsigned m = 0; m < 64; ++m) {
    BwdCase c;
    c.relu = m & 1;
    c.z = m & 2;
    c.gamma = m & 4;
    c.dz = m & 8;
    c.dgamma = m & 16;
    c.dbeta = m & 32;
    c.dt = kAllDtypes[k % 3];
    c.layout = Layout({4, 3, 5}, kAllOrders[k % 5]);
    ++k;
    backward_case(ctx, rng, c);
  }
}

// The mask on element counts around multiples of 32 (1 word exactly, a bit
// short, a bit over), in every order and dtype: each bit against the oracle,
// the tail bits zero (the words are poisoned with all ones first), the
// word count from xvk_batch_norm_mask_words; training and inference.
TEST_CASE("batch_norm ReLU mask: every bit, the word count and the tail") {
  Context ctx;
  Rng rng(22000);
  const std::vector<std::vector<int64_t>> counts = {{2, 1},     {31, 1},   {2, 16},      {3, 11},  {1, 3, 21},
                                                    {2, 4, 8},  {5, 13},   {2, 3, 2, 5}, {7, 9, 1}, {3, 1, 1, 43}};
  size_t k = 0;
  for (const auto &dims : counts)
    for (Order order : kAllOrders)
      for (DType dt : kAllDtypes)
        for (bool training : {true, false}) {
          FwdCase c;
          c.dt = dt;
          c.training = training;
          c.layout = Layout(dims, order);
          c.relu = c.mask = true;
          c.z = k % 2;
          c.mask_int32 = k % 3 == 0;
          ++k;
          forward_case(ctx, rng, c);
        }
}

// In-place: y == x and y == z in the forward (training and inference);
// dx == dy, dx == x, dz == dy (and dx == x with dz == dy) in the backward.
TEST_CASE("batch_norm in-place forward and backward") {
  Context ctx;
  Rng rng(23000);
  size_t k = 0;
  for (DType dt : kAllDtypes)
    for (Order order : {Order::cf_null, Order::cl_torch, Order::nhwc_null})
      for (const std::vector<int64_t> &dims : {std::vector<int64_t>{3, 5, 4, 3}, std::vector<int64_t>{7, 3}}) {
        for (bool training : {true, false})
          for (FwdInPlace ip : {FwdInPlace::y_is_x, FwdInPlace::y_is_z})
            for (bool relu : {false, true}) {
              FwdCase c;
              c.dt = dt;
              c.training = training;
              c.layout = Layout(dims, order);
              c.relu = c.mask = relu;
              c.z = ip == FwdInPlace::y_is_z || k % 2;
              c.inplace = ip;
              ++k;
              forward_case(ctx, rng, c);
            }
        for (BwdInPlace ip : {BwdInPlace::dx_is_dy, BwdInPlace::dx_is_x, BwdInPlace::dz_is_dy,
                              BwdInPlace::dx_is_x_dz_is_dy})
          for (bool relu : {false, true}) {
            BwdCase c;
            c.dt = dt;
            c.layout = Layout(dims, order);
            c.relu = relu;
            c.z = relu;
            c.inplace = ip;
            c.dz = ip == BwdInPlace::dz_is_dy || ip == BwdInPlace::dx_is_x_dz_is_dy || k % 2;
            ++k;
            backward_case(ctx, rng, c);
          }
      }
}

// NaN stays NaN: in inference only its element (and its mask bit is 0); in
// training its whole channel (the statistics are NaN).
TEST_CASE("batch_norm: a NaN in x") {
  Context ctx;
  Rng rng(24000);
  for (DType dt : kAllDtypes)
    for (Order order : {Order::cf_null, Order::cl_torch})
      for (bool training : {false, true}) {
        const std::string what = std::string(dtype_name(dt)) + " " + order_name(order) + (training ? " training" : " inference");
        INFO(what);
        const Layout l({2, 3, 5}, order);
        Inputs in = make_inputs(rng, l, dt, kNormal, training);
        const int64_t bad = (1 * 3 + 1) * 5 + 2;  // (i 1, channel 1, j 2)
        in.x[size_t(bad)] = kNaN;
        FwdCase c;
        c.dt = dt;
        c.training = training;
        c.layout = l;
        c.relu = c.mask = true;
        const FwdResult r = run_forward(ctx, c, in);
        for (int64_t k = 0; k < l.numel(); ++k) {
          const bool nan_expected = training ? (k / 5) % 3 == 1 : k == bad;
          CHECK(std::isnan(r.y[size_t(k)]) == nan_expected);
          if (nan_expected) {
            const int64_t p = l.memory(k);
            CHECK(((r.mask[size_t(p / 32)] >> (p % 32)) & 1u) == 0u);
          }
        }
        if (training)
          for (int64_t ch = 0; ch < 3; ++ch) {
            CHECK(std::isnan(r.saved_mean[size_t(ch)]) == (ch == 1));
            CHECK(std::isnan(r.saved_rstd[size_t(ch)]) == (ch == 1));
          }
      }
}

// ===========================================================================
// The tolerance tells careful fp32 statistics from sum-of-squares variance
//
// Channels with mean 1e4 and std 1e-2: var = E[x^2] - E[x]^2 in fp32 cancels
// catastrophically (x^2 ~ 1e8 has an ulp of 8; var is 1e-4). Two fp32
// BatchNorms are compared with the oracle exactly as the backend is: the naive
// one must be rejected, a careful one (two passes, pairwise sums, as a GPU
// reduction does them) accepted. Then the CPU backend, in both memory orders,
// passes by a wide margin (y with 1/1024 of the accumulation allowance).
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

// y, mean and rstd of each channel of (n, c, s)-ordered x, all in fp32.
void batch_norm_fp32(const std::vector<float> &x, int64_t n, int64_t c, int64_t s, float eps, bool naive,
                     std::vector<float> &y, std::vector<float> &mean, std::vector<float> &rstd) {
  y.assign(x.size(), 0.0f);
  mean.assign(size_t(c), 0.0f);
  rstd.assign(size_t(c), 0.0f);
  const int64_t m = n * s;
  std::vector<float> v(static_cast<size_t>(m)), t(static_cast<size_t>(m));
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) v[size_t(i * s + j)] = x[size_t((i * c + ch) * s + j)];
    float mu, var;
    if (naive) {
      float sum = 0, sq = 0;
      for (int64_t e = 0; e < m; ++e) {
        sum += v[size_t(e)];
        sq += v[size_t(e)] * v[size_t(e)];
      }
      mu = sum / float(m);
      var = sq / float(m) - mu * mu;
    } else {
      mu = pairwise_sum(v.data(), m) / float(m);
      for (int64_t e = 0; e < m; ++e) t[size_t(e)] = (v[size_t(e)] - mu) * (v[size_t(e)] - mu);
      var = pairwise_sum(t.data(), m) / float(m);
    }
    const float rs = 1.0f / std::sqrt(var + eps);
    mean[size_t(ch)] = mu;
    rstd[size_t(ch)] = rs;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const size_t e = size_t((i * c + ch) * s + j);
        y[e] = (x[e] - mu) * rs;
      }
  }
}

}  // namespace

TEST_CASE("batch_norm: the tolerance rejects sum-of-squares variance (mean 1e4, std 1e-2)") {
  Context ctx;
  Rng rng(25000);
  const Data offset{1e4, 1e-2, "mean 1e4 std 1e-2"};
  const std::vector<std::vector<int64_t>> cases = {{4, 3, 16}, {1, 3, 761}, {16, 3, 16, 16}, {8, 3, 64, 64}};
  size_t k = 0;
  for (const auto &dims : cases) {
    const Layout l(dims, k % 2 ? Order::nhwc_null : Order::cl_torch);
    const std::string what = l.text() + " (" + std::to_string(l.n * l.s) + " values per channel)";
    INFO(what);
    FwdCase c;
    c.layout = l;
    c.gamma = c.beta = false;
    c.data = offset;
    c.momentum = 0.25f;
    const Inputs in = make_inputs(rng, l, DType::f32, offset, true);
    const oracle::BatchNormForward e = oracle_forward(c, in);
    const Tolerance tol = tolerance(DType::f32);
    for (bool naive : {false, true}) {
      std::vector<float> y, mean, rstd;
      batch_norm_fp32(in.x, l.n, l.c, l.s, c.epsilon, naive, y, mean, rstd);
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
    const FwdResult got = run_forward(ctx, c, in);
    CHECK_CLOSE(compare("backend y", got.y, e.y.ref, e.y.scale, Tolerance{tol.out, tol.acc / 1024, tol.tiny}));
    CHECK_CLOSE(compare("backend saved_mean", got.saved_mean, e.mean.ref, e.mean.scale, tol));
    CHECK_CLOSE(compare("backend saved_rstd", got.saved_rstd, e.rstd.ref, {}, tol));
    CHECK_CLOSE(compare("backend running_var", got.running_var, e.running_var.ref, {}, tol));
    CHECK_CLOSE(compare("backend running_mean", got.running_mean, e.running_mean.ref, e.running_mean.scale, tol));
    ++k;
  }
}

// ===========================================================================
// The tolerance rejects shifted sum-of-squares batches (an outlier first)
//
// The GPU takes statistics of x - shift (shift = the channel's first value)
// in batches of a few values merged by Chan's rule. Within a batch it must
// use two passes (mean, then squared deviations): q - s * mean, the sum of
// squares minus the square of the sum, is exact enough while the shift is
// near the data but not when the first value is an outlier. With it 1000
// stds out, every other batch sits 1000 stds from the shift, and over 2^20
// values per channel the variance drifts by about 5%. Both forms are run
// here in fp32 on such data, as the GPU batches it, against the oracle: the
// oracle's tolerance (the one the GPU suite inherits through the CPU
// backend) must reject the first and accept the second; the CPU backend
// passes too.
// ===========================================================================

namespace {

// Mean and rstd of channel `ch` of (n, c, s)-ordered x as the GPU takes
// them: batches of kBatch values in (n, s) order around the first value,
// dealt round-robin to kThreads threads that each merge theirs in order
// (Chan's rule), then the threads' states merged pairwise.
struct Moments {
  float count = 0, mean = 0, m2 = 0;
  void merge(const Moments &b) {
    if (b.count == 0) return;
    const float total = count + b.count, delta = b.mean - mean, w = b.count / total;
    mean += delta * w;
    m2 += b.m2 + delta * delta * count * w;
    count = total;
  }
};

void batched_statistics(const std::vector<float> &x, int64_t n, int64_t c, int64_t s, int64_t ch, float eps,
                        bool sum_of_squares, float &mean, float &rstd) {
  constexpr int64_t kBatch = 16, kThreads = 1024;
  const int64_t m = n * s;
  auto at = [&](int64_t e) { return x[size_t(((e / s) * c + ch) * s + e % s)]; };
  const float shift = at(0);
  std::vector<Moments> threads(static_cast<size_t>(kThreads));
  for (int64_t b0 = 0; b0 < m; b0 += kBatch) {
    const int64_t b1 = std::min(m, b0 + kBatch);
    Moments b;
    b.count = float(b1 - b0);
    float sum = 0, sq = 0;
    for (int64_t e = b0; e < b1; ++e) {
      const float d = at(e) - shift;
      sum += d;
      sq += d * d;
    }
    b.mean = sum / b.count;
    if (sum_of_squares) {
      b.m2 = std::max(sq - sum * b.mean, 0.0f);
    } else {
      for (int64_t e = b0; e < b1; ++e) b.m2 += (at(e) - shift - b.mean) * (at(e) - shift - b.mean);
    }
    threads[size_t((b0 / kBatch) % kThreads)].merge(b);
  }
  for (int64_t h = kThreads / 2; h > 0; h /= 2)
    for (int64_t t = 0; t < h; ++t) threads[size_t(t)].merge(threads[size_t(t + h)]);
  mean = shift + threads[0].mean;
  rstd = 1.0f / std::sqrt(threads[0].m2 / float(m) + eps);
}

}  // namespace

TEST_CASE("batch_norm: the tolerance rejects shifted sum-of-squares batches (first value 1000 stds out)") {
  Context ctx;
  Rng rng(25001);
  const Layout l({256, 2, 64, 64}, Order::cf_null);  // 2^20 values per channel
  INFO(l.text());
  FwdCase c;
  c.layout = l;
  c.gamma = c.beta = false;
  c.data = kNormal;
  c.momentum = 0.25f;
  Inputs in = make_inputs(rng, l, DType::f32, kNormal, true);
  // (n = 0, ch, 0) moves by 1000: 500 to 2000 of the channel's stds (0.5 to 2).
  for (int64_t ch = 0; ch < l.c; ++ch) in.x[size_t(ch * l.s)] += 1000.0f;
  const oracle::BatchNormForward e = oracle_forward(c, in);
  const Tolerance tol = tolerance(DType::f32);
  for (bool sum_of_squares : {false, true}) {
    std::vector<float> mean(size_t(l.c)), rstd(size_t(l.c));
    for (int64_t ch = 0; ch < l.c; ++ch)
      batched_statistics(in.x, l.n, l.c, l.s, ch, c.epsilon, sum_of_squares, mean[size_t(ch)], rstd[size_t(ch)]);
    const Comparison cs = compare("rstd", rstd, e.rstd.ref, {}, tol);
    if (sum_of_squares) {
      CHECK_MESSAGE(!cs.ok, "shifted sum-of-squares batches passed: " << cs.message());
    } else {
      CHECK_CLOSE(cs);
      CHECK_CLOSE(compare("mean", mean, e.mean.ref, e.mean.scale, tol));
    }
  }
  const FwdResult got = run_forward(ctx, c, in);
  CHECK_CLOSE(compare("backend saved_rstd", got.saved_rstd, e.rstd.ref, {}, tol));
  CHECK_CLOSE(compare("backend saved_mean", got.saved_mean, e.mean.ref, e.mean.scale, tol));
  CHECK_CLOSE(compare("backend y", got.y, e.y.ref, e.y.scale, tol));
}

// ===========================================================================
// Backward against central finite differences of the forward
//
// The loss is sum(dy * y) with y the oracle's training forward in double
// (the batch statistics move with x); its derivatives with respect to x, z,
// gamma and beta, by central differences, check both the oracle's backward
// (which validates the oracle itself) and the backend's fp32 backward, on
// small fp32 cases in two memory orders, with and without ReLU, z and gamma.
// Error budget, as in test_cpu_numerics.cpp: fp32 outputs and statistics are
// within a few 2^-24 of exact, magnified at most by the channel sums (<= 12
// values): ~1e-6 of the largest gradient; central differences with h = 1e-4
// err by h^2/6 times the third derivative (O(1) here, epsilon 1e-3 keeping
// rstd tame) plus 1e-16/h of round-off: ~1e-8. We allow 2e-5 of the largest
// gradient plus 2e-6: far above both, far below a wrong formula (a missing
// term, biased for unbiased, a sign, a lost ReLU gate). Under ReLU the data is
// redrawn until every pre-activation is at least 0.02 from the kink.
// ===========================================================================

namespace {

constexpr double kStep = 1e-4;

void check_gradient(const char *what, const std::vector<double> &got, const std::vector<double> &fd) {
  REQUIRE(got.size() == fd.size());
  double m = 0;
  for (double v : fd) m = std::max(m, std::fabs(v));
  const double tol = 2e-5 * m + 2e-6;
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < fd.size(); ++i) {
    if (!(std::fabs(got[i] - fd[i]) <= tol)) ++bad;
    if (!(std::fabs(got[i] - fd[i]) <= std::fabs(got[worst] - fd[worst]))) worst = i;
  }
  CHECK_MESSAGE(bad == 0, std::string(what) << ": " << bad << " of " << fd.size() << " differ from finite differences; worst ["
                               << worst << "] " << got[worst] << " vs " << fd[worst] << " (tolerance " << tol << ")");
}

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

TEST_CASE("batch_norm backward against finite differences") {
  Context ctx;
  Rng rng(26000);
  const float eps = 1e-3f;
  const std::pair<std::vector<int64_t>, Order> layouts[] = {
      {{3, 2, 4}, Order::cf_null}, {{2, 3, 2, 2}, Order::cl_torch}, {{4, 3}, Order::cf_null}, {{2, 2, 3}, Order::nhwc_null}};
  for (const auto &[dims, order] : layouts)
    for (bool relu : {false, true})
      for (bool with_z : {false, true})
        for (bool with_gamma : {false, true}) {
          const Layout l(dims, order);
          const std::string what = l.text() + (relu ? " relu" : "") + (with_z ? " z" : "") + (with_gamma ? "" : " no-gamma");
          INFO(what);
          const oracle::BatchNormSpec spec = spec_of(l, DType::f32, relu, eps, 0.1f);
          const size_t numel = size_t(l.numel()), c = size_t(l.c);
          Inputs in;
          std::vector<double> x, z, g, b;
          bool clear = false;
          for (int attempt = 0; attempt < 200 && !clear; ++attempt) {
            in = make_inputs(rng, l, DType::f32, Data{0.5, 1.0, "N(0.5, 1)"}, true);
            if (!with_gamma) in.gamma.assign(c, 1.0f);
            x = widen(in.x), z = widen(in.z), g = widen(in.gamma), b = widen(in.beta);
            const oracle::BatchNormForward f =
                oracle::batch_norm_forward(spec, true, x, with_z ? &z : nullptr, &g, &b, nullptr, nullptr);
            clear = true;
            for (double v : f.pre.ref) clear = clear && (!relu || std::fabs(v) >= 0.02);
          }
          REQUIRE(clear);
          const std::vector<double> dy = widen(in.dy);
          auto loss = [&](const std::vector<double> &xv, const std::vector<double> &zv, const std::vector<double> &gv,
                          const std::vector<double> &bv) {
            const oracle::BatchNormForward f =
                oracle::batch_norm_forward(spec, true, xv, with_z ? &zv : nullptr, &gv, &bv, nullptr, nullptr);
            double sum = 0;
            for (size_t k = 0; k < numel; ++k) sum += dy[k] * f.y.ref[k];
            return sum;
          };
          const std::vector<double> fd_x = finite_differences(x, [&](const std::vector<double> &v) { return loss(v, z, g, b); });
          const std::vector<double> fd_z = finite_differences(z, [&](const std::vector<double> &v) { return loss(x, v, g, b); });
          const std::vector<double> fd_g = finite_differences(g, [&](const std::vector<double> &v) { return loss(x, z, v, b); });
          const std::vector<double> fd_b = finite_differences(b, [&](const std::vector<double> &v) { return loss(x, z, g, v); });

          // The backend: forward (for the saved statistics and the mask), backward.
          BwdCase bc;
          bc.layout = l;
          bc.relu = relu;
          bc.z = with_z;
          bc.gamma = with_gamma;
          FwdCase fc;
          fc.layout = l;
          fc.relu = fc.mask = relu;
          fc.z = with_z;
          fc.gamma = with_gamma;
          fc.running = false;
          fc.epsilon = eps;
          const FwdResult fr = run_forward(ctx, fc, in);
          const Saved sv{fr.y, fr.saved_mean, fr.saved_rstd, fr.mask};
          const BwdResult got = run_backward(ctx, bc, in, sv, relu ? Source::mask : Source::none);
          check_gradient("backend dx", widen(got.dx), fd_x);
          check_gradient("backend dgamma", widen(got.dgamma), fd_g);
          check_gradient("backend dbeta", widen(got.dbeta), fd_b);
          if (with_z) check_gradient("backend dz", widen(got.dz), fd_z);

          // The oracle's backward, from the same saved statistics and y > 0.
          std::vector<bool> positive(numel);
          for (size_t k = 0; k < numel; ++k) positive[k] = fr.y[k] > 0.0f;
          const oracle::BatchNormBackward e = oracle::batch_norm_backward(
              spec, dy, x, with_gamma ? &g : nullptr, widen(fr.saved_mean), widen(fr.saved_rstd), relu ? &positive : nullptr);
          check_gradient("oracle dx", e.dx.ref, fd_x);
          check_gradient("oracle dgamma", e.dgamma.ref, fd_g);
          check_gradient("oracle dbeta", e.dbeta.ref, fd_b);
          if (with_z) check_gradient("oracle dz", e.dz.ref, fd_z);
        }
}

// ===========================================================================
// Determinism of the reductions over N and the spatial dimensions
// ===========================================================================

TEST_CASE("batch_norm backward: dgamma and dbeta are bitwise deterministic") {
  Context ctx;
  Rng rng(27000);
  for (DType dt : {DType::f32, DType::bf16})
    for (Order order : {Order::cf_null, Order::cl_torch}) {
      const Layout l({32, 13, 7, 9}, order);
      const std::string what = std::string(dtype_name(dt)) + " " + l.text();
      INFO(what);
      BwdCase c;
      c.dt = dt;
      c.layout = l;
      c.relu = true;
      const Inputs in = make_inputs(rng, l, dt, Data{0.3, 1.7, "N(0.3, 1.7)"}, true);
      const Saved sv = run_saved_forward(ctx, c, in);
      const BwdResult first = run_backward(ctx, c, in, sv, Source::mask);
      for (float v : first.dgamma) CHECK(!std::isnan(v));
      for (float v : first.dbeta) CHECK(!std::isnan(v));
      for (int run = 1; run < 3; ++run) {
        const BwdResult again = run_backward(ctx, c, in, sv, Source::mask);
        CHECK_MESSAGE(same_bits(again.dgamma, first.dgamma), "dgamma differs between runs");
        CHECK_MESSAGE(same_bits(again.dbeta, first.dbeta), "dbeta differs between runs");
        CHECK_MESSAGE(same_bits(again.dx, first.dx), "dx differs between runs");
      }
    }
}
