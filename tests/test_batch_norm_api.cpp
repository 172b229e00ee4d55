// BatchNorm API validation on the CPU backend: xvk_batch_norm_forward_training,
// xvk_batch_norm_forward_inference, xvk_batch_norm_backward and
// xvk_batch_norm_mask_words.
//
// Every failing call is checked for
//   - its exact status,
//   - a fresh message (a known failure is provoked first) that starts with the
//     entry point's name and contains a distinctive text naming the argument,
//   - every byte of every tensor the call was given unchanged: the outputs
//     (y, mask, saved statistics, dx, dz, dgamma, dbeta), the running
//     statistics (in/out in training), the inputs, and any buffer a case built
//     to make tensors share memory.
// Each entry point's valid call is run too: it must succeed, write all of its
// outputs (they start poisoned with NaN) and leave its inputs alone, so a
// rejection is caused by the one thing a case changes.
//
// The last cases pin two defects this suite found and that were fixed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace xvk_test;

namespace {

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

const std::string kStale = "xvk_context_synchronize: ctx is NULL";

std::string last_error() { return xvk_last_error_message(); }

// Leaves a known message behind, so that a check can tell a fresh message from an old one.
void stale_error() {
  REQUIRE(xvk_context_synchronize(nullptr) == XVK_ERROR_INVALID_ARGUMENT);
  REQUIRE(last_error() == kStale);
}

// Runs `call`, expecting `status` and a fresh message from `function` that
// contains each of `parts`; every tensor in `watched` must be unchanged.
void expect_error(const std::string &function, xvk_status_t status, const std::vector<std::string> &parts,
                  const std::vector<const Tensor *> &watched, const std::function<xvk_status_t()> &call) {
  std::vector<Bytes> before;
  for (const Tensor *t : watched) before.push_back(t->snapshot());
  stale_error();
  const xvk_status_t got = call();
  const std::string message = last_error();
  INFO("message: \"" << message << "\"");
  CHECK_MESSAGE(got == status, "status " << std::string(xvk_status_string(got)) << ", expected "
                                         << std::string(xvk_status_string(status)));
  CHECK_MESSAGE(message.rfind(function + ": ", 0) == 0, "the message does not start with \"" << function << ": \"");
  for (const std::string &part : parts)
    CHECK_MESSAGE(message.find(part) != std::string::npos, "the message does not contain \"" << part << "\"");
  for (size_t i = 0; i < watched.size(); ++i)
    CHECK_MESSAGE(watched[i]->snapshot() == before[i], "tensor #" << i << " was modified by a failing call");
}

bool has_nan(const std::vector<float> &v) {
  return std::any_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

// The library's name of a dtype, as its messages spell it.
std::string lib_dtype_name(DType d) {
  return d == DType::f32 ? "float32" : d == DType::f16 ? "float16" : "bfloat16";
}

constexpr DLDataType kUInt32{kDLUInt, 32, 1};
constexpr DLDataType kInt32{kDLInt, 32, 1};

int64_t mask_words_for(int64_t numel) { return (numel + 31) / 32; }

// ---------------------------------------------------------------------------
// Memory orders
// ---------------------------------------------------------------------------

// Element strides of `shape` stored densely in `order` (outermost dimension first).
std::vector<int64_t> strides_in_order(const std::vector<int64_t> &shape, const std::vector<int> &order) {
  std::vector<int64_t> s(shape.size(), 0);
  int64_t step = 1;
  for (auto k = order.rbegin(); k != order.rend(); ++k) {
    s[size_t(*k)] = step;
    step *= shape[size_t(*k)];
  }
  return s;
}

// (N, C, spatial...) and (N, spatial..., C), C at dimension `axis`.
std::vector<int> channels_first_order(int ndim, int axis) {
  std::vector<int> o = {0, axis};
  for (int k = 1; k < ndim; ++k)
    if (k != axis) o.push_back(k);
  return o;
}
std::vector<int> channels_last_order(int ndim, int axis) {
  std::vector<int> o = {0};
  for (int k = 1; k < ndim; ++k)
    if (k != axis) o.push_back(k);
  o.push_back(axis);
  return o;
}

bool is_row_major(const std::vector<int> &order) { return std::is_sorted(order.begin(), order.end()); }

// Raw 32-bit words of a mask tensor, in element order.
std::vector<uint32_t> read_words(const Tensor &t) {
  const Bytes b = t.snapshot();
  std::vector<uint32_t> w(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(&w[size_t(i)], b.data() + t.byte_of(i), 4);
  return w;
}

void write_words(Tensor &t, const std::vector<uint32_t> &w) {
  REQUIRE(int64_t(w.size()) == t.numel());
  Bytes b = t.snapshot();
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(b.data() + t.byte_of(i), &w[size_t(i)], 4);
  t.restore(b);
}

// The mask the header defines for y: bit e is "y > 0" for the element at
// position e of y's memory order; the bits past the last element are 0.
std::vector<uint32_t> expected_mask(const Tensor &y) {
  const std::vector<float> v = y.read();  // logical order
  const size_t elem = dtype_size(y.dtype());
  std::vector<uint32_t> w(size_t(mask_words_for(y.numel())), 0u);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t e = int64_t((y.byte_of(i) - y.dl()->byte_offset) / elem);
    if (v[size_t(i)] > 0) w[size_t(e / 32)] |= 1u << (e % 32);
  }
  return w;
}

// ---------------------------------------------------------------------------
// One call of an entry point, every argument held so that a case can change one.
// ---------------------------------------------------------------------------

enum class Fn { training, inference, backward };
constexpr Fn kAllFns[] = {Fn::training, Fn::inference, Fn::backward};

std::string function_name(Fn f) {
  switch (f) {
    case Fn::training: return "xvk_batch_norm_forward_training";
    case Fn::inference: return "xvk_batch_norm_forward_inference";
    case Fn::backward: return "xvk_batch_norm_backward";
  }
  return "?";
}

// act: shaped like x (x, z, y, dy, dx, dz); chan: a float32 per-channel
// vector; mask: the ReLU bitmask (32-bit words).
enum class Role { act, chan, mask };

struct Arg {
  std::string name;
  Role role = Role::act;
  bool output = false;     // written by a successful call (running stats in training too)
  bool required = false;   // NULL is an error
  bool reference = false;  // x (forward) or dy (backward): the tensor the others must match
  std::unique_ptr<Tensor> tensor;
  TensorDesc desc;  // what the call is given; absent means NULL
};

struct Setup {
  std::vector<int64_t> shape = {2, 3, 4, 5};  // x's logical shape: 120 elements, 4 mask words
  DType dtype = DType::f16;                   // activations; parameters and statistics are float32
  int32_t channel_axis = 1;
  bool channels_last = false;    // memory order of every activation tensor
  bool relu = true;              // options->activation
  bool with_mask = true;         // forward: write the mask; backward: read it (needs relu)
  bool backward_uses_y = false;  // backward under ReLU: y instead of the mask
  uint64_t seed = 1;
};

struct Call {
  Fn fn = Fn::training;
  Setup setup;
  xvk_context *ctx = nullptr;
  xvk_batch_norm_options options = XVK_BATCH_NORM_OPTIONS_INIT;
  bool null_options = false;
  std::vector<std::unique_ptr<Arg>> args;
  std::vector<std::unique_ptr<Tensor>> extra;  // buffers cases build; watched too

  std::string function() const { return function_name(fn); }
  std::string reference() const { return fn == Fn::backward ? "dy" : "x"; }
  Arg *find(const std::string &name) {
    for (auto &a : args)
      if (a->name == name) return a.get();
    return nullptr;
  }
  Arg &arg(const std::string &name) {
    Arg *a = find(name);
    REQUIRE_MESSAGE(a != nullptr, "no argument " << name);
    return *a;
  }
  Tensor &tensor(const std::string &name) { return *arg(name).tensor; }
  DLTensor *t(const std::string &name) {
    Arg *a = find(name);
    return a ? a->desc.get() : nullptr;
  }
  std::vector<const Tensor *> watched() const {
    std::vector<const Tensor *> out;
    for (auto &a : args) out.push_back(a->tensor.get());
    for (auto &e : extra) out.push_back(e.get());
    return out;
  }
  xvk_status_t run() {
    const xvk_batch_norm_options *o = null_options ? nullptr : &options;
    switch (fn) {
      case Fn::training:
        return xvk_batch_norm_forward_training(ctx, t("x"), t("z"), t("gamma"), t("beta"), o, t("y"), t("mask"),
                                               t("running_mean"), t("running_var"), t("saved_mean"),
                                               t("saved_rstd"));
      case Fn::inference:
        return xvk_batch_norm_forward_inference(ctx, t("x"), t("z"), t("gamma"), t("beta"), t("running_mean"),
                                                t("running_var"), o, t("y"), t("mask"));
      case Fn::backward:
        return xvk_batch_norm_backward(ctx, t("dy"), t("x"), t("mask"), t("y"), t("gamma"), t("saved_mean"),
                                       t("saved_rstd"), o, t("dx"), t("dz"), t("dgamma"), t("dbeta"));
    }
    return XVK_ERROR_INTERNAL;
  }
  void expect(xvk_status_t status, const std::vector<std::string> &parts) {
    expect_error(function(), status, parts, watched(), [&] { return run(); });
  }
};

enum class Fill { none, normal, positive, words };

int axis_of(const Setup &s) {
  const int ndim = int(s.shape.size());
  return s.channel_axis < 0 ? ndim + s.channel_axis : s.channel_axis;
}

// Strides of the activation tensors: empty (NULL strides) where the wanted
// memory order is row-major, else explicit.
std::vector<int64_t> act_strides(const Setup &s) {
  const int ndim = int(s.shape.size()), axis = axis_of(s);
  const std::vector<int> order = s.channels_last ? channels_last_order(ndim, axis) : channels_first_order(ndim, axis);
  if (is_row_major(order)) return {};
  return strides_in_order(s.shape, order);
}

Arg &add(Call &c, Rng &rng, const std::string &name, Role role, bool output, bool required, Fill fill,
         bool present = true) {
  const Setup &s = c.setup;
  const int64_t numel = product(s.shape);
  auto a = std::make_unique<Arg>();
  a->name = name;
  a->role = role;
  a->output = output;
  a->required = required;
  switch (role) {
    case Role::act: a->tensor = std::make_unique<Tensor>(c.ctx, s.shape, s.dtype, act_strides(s)); break;
    case Role::chan:
      a->tensor = std::make_unique<Tensor>(c.ctx, std::vector<int64_t>{s.shape[size_t(axis_of(s))]}, DType::f32);
      break;
    case Role::mask:
      // 4-byte elements; the descriptor says uint32.
      a->tensor = std::make_unique<Tensor>(c.ctx, std::vector<int64_t>{mask_words_for(numel)}, DType::f32);
      break;
  }
  Tensor &t = *a->tensor;
  const size_t n = size_t(t.numel());
  const DType fill_dtype = role == Role::act ? s.dtype : DType::f32;
  switch (fill) {
    case Fill::none: break;  // left poisoned (NaN)
    case Fill::normal: t.fill(rng.normal(n, 0.25, 1.0, fill_dtype)); break;
    case Fill::positive: t.fill(rng.uniform(n, 0.5, 2.0, fill_dtype)); break;
    case Fill::words: {
      std::vector<uint32_t> w(n);
      for (auto &v : w) v = uint32_t(rng.engine()());
      const int64_t tail = numel % 32;  // the bits past the last element are 0
      if (!w.empty() && tail) w.back() &= (1u << tail) - 1u;
      write_words(t, w);
      break;
    }
  }
  a->desc = t.desc();
  if (role == Role::mask) a->desc.t().dtype = kUInt32;
  a->desc.set_present(present);
  c.args.push_back(std::move(a));
  return *c.args.back();
}

std::unique_ptr<Call> make_call(xvk_context *ctx, Fn fn, const Setup &s = Setup{}) {
  auto c = std::make_unique<Call>();
  c->fn = fn;
  c->setup = s;
  c->ctx = ctx;
  c->options.activation = s.relu ? XVK_ACTIVATION_RELU : XVK_ACTIVATION_NONE;
  c->options.channel_axis = s.channel_axis;
  Rng rng(s.seed * 7919 + uint64_t(fn));
  constexpr bool in = false, out = true, req = true, opt = false;
  if (fn != Fn::backward) {
    add(*c, rng, "x", Role::act, in, req, Fill::normal).reference = true;
    add(*c, rng, "z", Role::act, in, opt, Fill::normal);
    add(*c, rng, "gamma", Role::chan, in, opt, Fill::positive);
    add(*c, rng, "beta", Role::chan, in, opt, Fill::normal);
    if (fn == Fn::training) {
      add(*c, rng, "running_mean", Role::chan, out, opt, Fill::normal);  // in/out
      add(*c, rng, "running_var", Role::chan, out, opt, Fill::positive);
    } else {
      add(*c, rng, "running_mean", Role::chan, in, req, Fill::normal);
      add(*c, rng, "running_var", Role::chan, in, req, Fill::positive);
    }
    add(*c, rng, "y", Role::act, out, req, Fill::none);
    add(*c, rng, "mask", Role::mask, out, opt, Fill::none, s.relu && s.with_mask);
    if (fn == Fn::training) {
      add(*c, rng, "saved_mean", Role::chan, out, opt, Fill::none);
      add(*c, rng, "saved_rstd", Role::chan, out, opt, Fill::none);
    }
  } else {
    add(*c, rng, "dy", Role::act, in, req, Fill::normal).reference = true;
    add(*c, rng, "x", Role::act, in, req, Fill::normal);
    add(*c, rng, "mask", Role::mask, in, opt, Fill::words, s.relu && !s.backward_uses_y);
    add(*c, rng, "y", Role::act, in, opt, Fill::normal, s.relu && s.backward_uses_y);
    add(*c, rng, "gamma", Role::chan, in, opt, Fill::positive);
    add(*c, rng, "saved_mean", Role::chan, in, req, Fill::normal);
    add(*c, rng, "saved_rstd", Role::chan, in, req, Fill::positive);
    add(*c, rng, "dx", Role::act, out, req, Fill::none);
    add(*c, rng, "dz", Role::act, out, opt, Fill::none);
    add(*c, rng, "dgamma", Role::chan, out, opt, Fill::none);
    add(*c, rng, "dbeta", Role::chan, out, opt, Fill::none);
  }
  return c;
}

// A fresh tensor for argument `a` (same role, dtype and descriptor dtype),
// kept and watched by the call; inputs get values.
void replace(Call &c, Arg &a, std::vector<int64_t> shape, std::vector<int64_t> strides = {}) {
  const DLDataType dl = a.desc.t().dtype;
  c.extra.push_back(std::make_unique<Tensor>(c.ctx, std::move(shape), a.tensor->dtype(), std::move(strides)));
  Tensor &t = *c.extra.back();
  if (!a.output) {
    std::vector<uint32_t> w(size_t(t.numel()), 0x5u);
    if (a.role == Role::mask)
      write_words(t, w);
    else
      t.fill(std::vector<float>(size_t(t.numel()), 1.0f));
  }
  a.desc = t.desc();
  a.desc.t().dtype = dl;
}

// Runs the valid call: it must succeed, leave the message alone, write every
// output it was given (finite values; the mask as y defines it; running
// statistics moved), and leave every input and absent argument unchanged.
void expect_valid_call(Call &c) {
  std::vector<Bytes> before;
  for (auto &a : c.args) before.push_back(a->tensor->snapshot());
  stale_error();
  const xvk_status_t status = c.run();
  REQUIRE_MESSAGE(status == XVK_SUCCESS, c.function() << " failed: " << last_error());
  CHECK(last_error() == kStale);  // success leaves the message alone
  for (size_t i = 0; i < c.args.size(); ++i) {
    Arg &a = *c.args[i];
    INFO(c.function() << ": " << a.name);
    if (!a.desc.present() || !a.output) {
      CHECK_MESSAGE(a.tensor->snapshot() == before[i], a.name << " was written");
      continue;
    }
    if (a.role == Role::mask) {
      CHECK(read_words(*a.tensor) == expected_mask(c.tensor("y")));
    } else {
      CHECK_MESSAGE(!has_nan(a.tensor->read()), a.name << " was not fully written");
      if (a.name == "running_mean" || a.name == "running_var")
        CHECK_MESSAGE(a.tensor->snapshot() != before[i], a.name << " was not updated");
    }
  }
}

// Runs a call that must succeed without writing anything (empty tensors).
void expect_success_writes_nothing(Call &c) {
  const auto watched = c.watched();
  std::vector<Bytes> before;
  for (const Tensor *t : watched) before.push_back(t->snapshot());
  const xvk_status_t status = c.run();
  CHECK_MESSAGE(status == XVK_SUCCESS, c.function() << " failed: " << last_error());
  for (size_t i = 0; i < watched.size(); ++i)
    CHECK_MESSAGE(watched[i]->snapshot() == before[i], "tensor #" << i << " was written");
}

// ---------------------------------------------------------------------------
// Mutations that make one tensor argument invalid
// ---------------------------------------------------------------------------

struct Mutation {
  std::string what;
  std::function<bool(const Call &, const Arg &)> applies;
  std::function<void(Call &, Arg &)> apply;
  xvk_status_t status;
  std::function<std::string(const Call &, const Arg &)> message;
};

std::string with_name(const std::string &pattern, const Arg &a) {
  std::string s = pattern;
  for (size_t at = s.find("{}"); at != std::string::npos; at = s.find("{}")) s.replace(at, 2, a.name);
  return s;
}

std::vector<Mutation> mutations_for(Role role, bool reference) {
  auto text = [](std::string pattern) {
    return [pattern](const Call &, const Arg &a) { return with_name(pattern, a); };
  };
  auto yes = [](const Call &, const Arg &) { return true; };
  std::vector<Mutation> m = {
      {"NULL", [](const Call &, const Arg &a) { return a.required; },
       [](Call &, Arg &a) { a.desc.set_present(false); }, XVK_ERROR_INVALID_ARGUMENT, text("{} is NULL")},
      {"ndim -1", yes, [](Call &, Arg &a) { a.desc.t().ndim = -1; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{} has ndim -1; expected 0 to 64")},
      {"shape NULL", yes, [](Call &, Arg &a) { a.desc.t().shape = nullptr; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{}->shape is NULL")},
      {"negative size", yes,
       [](Call &, Arg &a) {
         a.desc.shape()[0] = -3;
         a.desc.resync();
       },
       XVK_ERROR_INVALID_ARGUMENT, text("{} has a negative size -3 in dimension 0")},
      {"data NULL", yes, [](Call &, Arg &a) { a.desc.t().data = nullptr; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{}->data is NULL")},
      {"misaligned data", yes, [](Call &, Arg &a) { a.desc.t().byte_offset += 1; }, XVK_ERROR_INVALID_ARGUMENT,
       [](const Call &, const Arg &a) {
         return a.name + "'s address (data + byte_offset) is not aligned to its " +
                std::to_string(a.desc.get()->dtype.bits / 8) + "-byte elements";
       }},
      {"int8", yes, [](Call &, Arg &a) { a.desc.t().dtype = DLDataType{kDLInt, 8, 1}; }, XVK_ERROR_UNSUPPORTED,
       [role](const Call &, const Arg &a) {
         return a.name + " has dtype int8; expected " +
                (role == Role::act ? "float32, float16, bfloat16" : role == Role::chan ? "float32" : "uint32 (or int32)");
       }},
      {"float64", yes, [](Call &, Arg &a) { a.desc.t().dtype = DLDataType{kDLFloat, 64, 1}; },
       XVK_ERROR_UNSUPPORTED, text("{} has dtype float64")},
      {"2 lanes", yes, [](Call &, Arg &a) { a.desc.t().dtype.lanes = 2; }, XVK_ERROR_UNSUPPORTED,
       text("{} has dtype ")},
      {"device CUDA", yes, [](Call &, Arg &a) { a.desc.t().device = DLDevice{kDLCUDA, 0}; },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is on device (kDLCUDA, 0); this cpu context is on (kDLCPU, 0)")},
      {"device ROCm", yes, [](Call &, Arg &a) { a.desc.t().device = DLDevice{kDLROCM, 0}; },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is on device (kDLROCM, 0)")},
      {"device id 1", yes, [](Call &, Arg &a) { a.desc.t().device = DLDevice{kDLCPU, 1}; },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is on device (kDLCPU, 1)")},
  };
  if (role == Role::act) {
    // Dense in an order that is neither (N, C, H, W) nor (N, H, W, C): the
    // same bytes, so a call that wrongly accepted it stays in bounds.
    for (const std::vector<int> &order : {std::vector<int>{0, 2, 1, 3}, std::vector<int>{0, 1, 3, 2}}) {
      const std::string what = "dense in order (" + std::to_string(order[0]) + std::to_string(order[1]) +
                               std::to_string(order[2]) + std::to_string(order[3]) + ")";
      m.push_back({what, [](const Call &c, const Arg &) { return c.setup.shape.size() == 4; },
                   [order](Call &c, Arg &a) { a.desc.set_strides(strides_in_order(c.setup.shape, order)); },
                   // x itself: UNSUPPORTED. Any other activation: does not give x's memory order.
                   reference ? XVK_ERROR_UNSUPPORTED : XVK_ERROR_INVALID_ARGUMENT,
                   reference ? text("{}'s strides are neither dense channels-first (N, C, spatial) nor dense "
                                    "channels-last (N, spatial, C)")
                             : text("{}'s strides do not give ")});
    }
  }
  if (role == Role::act && !reference) {
    m.push_back({"the other dense memory order", yes,
                 [](Call &c, Arg &a) {
                   const int ndim = int(c.setup.shape.size()), axis = axis_of(c.setup);
                   a.desc.set_strides(strides_in_order(c.setup.shape, c.setup.channels_last
                                                                          ? channels_first_order(ndim, axis)
                                                                          : channels_last_order(ndim, axis)));
                 },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   // The reference is x in the forwards and dy in the backward.
                   return a.name + "'s strides do not give " + c.reference() +
                          "'s memory order (" +
                          (c.setup.channels_last ? "dense channels-last: N, spatial, C)"
                                                 : "dense channels-first: N, C, spatial)");
                 }});
    m.push_back({"another float dtype", yes,
                 [](Call &c, Arg &a) {
                   a.desc.t().dtype = dl_dtype(c.setup.dtype == DType::f16 ? DType::bf16 : DType::f16);
                 },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   const DType other = c.setup.dtype == DType::f16 ? DType::bf16 : DType::f16;
                   return a.name + " has dtype " + lib_dtype_name(other) + ", expected " +
                          lib_dtype_name(c.setup.dtype) + " (the dtype of " + c.reference() + ")";
                 }});
    m.push_back({"last dimension one short", yes,
                 [](Call &, Arg &a) {
                   a.desc.shape().back() -= 1;
                   a.desc.resync();
                 },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   std::vector<int64_t> s = c.setup.shape;
                   s.back() -= 1;
                   return a.name + " has shape " + shape_string(s) + ", expected " + shape_string(c.setup.shape) +
                          " (the shape of " + c.reference() + ")";
                 }});
    m.push_back({"the same elements in another shape", yes,
                 [](Call &c, Arg &a) {
                   a.desc.clear_strides();
                   a.desc.set_shape({c.setup.shape[0], product(c.setup.shape) / c.setup.shape[0]});
                 },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   return a.name + " has shape " +
                          shape_string({c.setup.shape[0], product(c.setup.shape) / c.setup.shape[0]}) +
                          ", expected " + shape_string(c.setup.shape);
                 }});
  }
  if (role == Role::chan) {
    for (DType d : {DType::f16, DType::bf16})
      m.push_back({lib_dtype_name(d) + " statistics or parameters", yes,
                   [d](Call &, Arg &a) { a.desc.t().dtype = dl_dtype(d); }, XVK_ERROR_INVALID_ARGUMENT,
                   [d](const Call &, const Arg &a) {
                     return a.name + " has dtype " + lib_dtype_name(d) + "; expected float32";
                   }});
    m.push_back({"int32", yes, [](Call &, Arg &a) { a.desc.t().dtype = kInt32; }, XVK_ERROR_UNSUPPORTED,
                 text("{} has dtype int32; expected float32")});
    m.push_back({"C - 1 elements", yes,
                 [](Call &c, Arg &a) { a.desc.set_shape({c.setup.shape[size_t(axis_of(c.setup))] - 1}); },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   const int64_t ch = c.setup.shape[size_t(axis_of(c.setup))];
                   return a.name + " has " + std::to_string(ch - 1) + " elements, expected " + std::to_string(ch) +
                          " (the number of channels)";
                 }});
    m.push_back({"C + 1 elements as [1, C + 1]", yes,
                 [](Call &c, Arg &a) { replace(c, a, {1, c.setup.shape[size_t(axis_of(c.setup))] + 1}); },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   const int64_t ch = c.setup.shape[size_t(axis_of(c.setup))];
                   return a.name + " has " + std::to_string(ch + 1) + " elements, expected " + std::to_string(ch);
                 }});
    m.push_back({"not contiguous", yes,
                 [](Call &c, Arg &a) { replace(c, a, {c.setup.shape[size_t(axis_of(c.setup))]}, {2}); },
                 XVK_ERROR_UNSUPPORTED, text("{} has stride 2 in dimension 0, expected 1")});
  }
  if (role == Role::mask) {
    m.push_back({"float32", yes, [](Call &, Arg &a) { a.desc.t().dtype = dl_dtype(DType::f32); },
                 XVK_ERROR_INVALID_ARGUMENT, text("{} has dtype float32; expected uint32 (or int32)")});
    m.push_back({"float16", yes, [](Call &, Arg &a) { a.desc.t().dtype = dl_dtype(DType::f16); },
                 XVK_ERROR_INVALID_ARGUMENT, text("{} has dtype float16; expected uint32 (or int32)")});
    m.push_back({"int16", yes, [](Call &, Arg &a) { a.desc.t().dtype = DLDataType{kDLInt, 16, 1}; },
                 XVK_ERROR_UNSUPPORTED, text("{} has dtype int16; expected uint32 (or int32)")});
    m.push_back({"uint64", yes, [](Call &, Arg &a) { a.desc.t().dtype = DLDataType{kDLUInt, 64, 1}; },
                 XVK_ERROR_UNSUPPORTED, text("{} has dtype uint64; expected uint32 (or int32)")});
    m.push_back({"one word short", yes,
                 [](Call &c, Arg &a) { a.desc.set_shape({mask_words_for(product(c.setup.shape)) - 1}); },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   const int64_t w = mask_words_for(product(c.setup.shape));
                   return a.name + " has " + std::to_string(w - 1) + " elements, expected " + std::to_string(w) +
                          " (xvk_batch_norm_mask_words of " + c.reference() + ")";
                 }});
    m.push_back({"one word too many", yes,
                 [](Call &c, Arg &a) { replace(c, a, {mask_words_for(product(c.setup.shape)) + 1}); },
                 XVK_ERROR_INVALID_ARGUMENT, [](const Call &c, const Arg &a) {
                   const int64_t w = mask_words_for(product(c.setup.shape));
                   return a.name + " has " + std::to_string(w + 1) + " elements, expected " + std::to_string(w);
                 }});
    m.push_back({"one word per element (a byte mask's size)", yes,
                 [](Call &c, Arg &a) { replace(c, a, {product(c.setup.shape)}); }, XVK_ERROR_INVALID_ARGUMENT,
                 text("{} has 120 elements, expected 4")});
    m.push_back({"not contiguous", yes,
                 [](Call &c, Arg &a) { replace(c, a, {mask_words_for(product(c.setup.shape))}, {2}); },
                 XVK_ERROR_UNSUPPORTED, text("{} has stride 2 in dimension 0, expected 1")});
  }
  return m;
}

// Every mutation on every argument of the calls `setups` build for `fn`.
void check_every_tensor_argument(Fn fn, const std::vector<Setup> &setups) {
  Context ctx;
  for (const Setup &s : setups) {
    {
      auto valid = make_call(ctx, fn, s);
      expect_valid_call(*valid);
    }
    const auto probe = make_call(ctx, fn, s);
    int checks = 0;
    for (const auto &proto : probe->args) {
      if (!proto->desc.present()) continue;
      for (const Mutation &m : mutations_for(proto->role, proto->reference)) {
        auto c = make_call(ctx, fn, s);
        Arg &a = c->arg(proto->name);
        if (!m.applies(*c, a)) continue;
        INFO(c->function() << std::string(s.channels_last ? " (channels-last)" : " (channels-first)")
                           << std::string(s.backward_uses_y ? " (backward with y)" : "") << ": " << a.name << ": " << m.what);
        const std::string message = m.message(*c, a);
        m.apply(*c, a);
        c->expect(m.status, {message});
        ++checks;
      }
    }
    CHECK(checks >= 12 * int(std::count_if(probe->args.begin(), probe->args.end(),
                                           [](const std::unique_ptr<Arg> &a) { return a->desc.present(); })));
  }
}

Setup channels_last_setup() {
  Setup s;
  s.channels_last = true;
  return s;
}

// ---------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------

// Puts argument `a` in the middle of a fresh buffer (with its values) and
// argument `b` `shift_bytes` after it (with its own values, under a's where
// they meet; b keeps its shape, dtype and strides). The buffer has room for
// both wherever they land, so a call that wrongly accepted the overlap stays
// in bounds; it is watched with the call's tensors.
void share(Call &c, const std::string &a, const std::string &b, int64_t shift_bytes) {
  Arg &A = c.arg(a), &B = c.arg(b);
  const size_t room = (std::max(A.tensor->bytes(), B.tensor->bytes()) + 255) / 256 * 256;
  REQUIRE(size_t(std::llabs(shift_bytes)) < room);
  c.extra.push_back(std::make_unique<Tensor>(c.ctx, std::vector<int64_t>{int64_t(3 * room / 4)}, DType::f32));
  Tensor &big = *c.extra.back();
  Bytes bytes = big.snapshot();
  const size_t at_a = room, at_b = size_t(int64_t(room) + shift_bytes);
  const Bytes av = A.tensor->snapshot(), bv = B.tensor->snapshot();
  std::copy(bv.begin(), bv.end(), bytes.begin() + long(at_b));
  std::copy(av.begin(), av.end(), bytes.begin() + long(at_a));
  big.restore(bytes);
  const uint64_t a_offset = A.desc.t().byte_offset, b_offset = B.desc.t().byte_offset;
  A.desc.t().data = big.allocation();
  A.desc.t().byte_offset = at_a + a_offset;
  B.desc.t().data = big.allocation();
  B.desc.t().byte_offset = at_b + b_offset;
}

struct OverlapCase {
  const char *a, *b;
  int64_t shift_bytes;
  const char *message;  // NULL: they do not share an element; the call succeeds
};

void check_overlaps(Fn fn, const Setup &s, const std::vector<OverlapCase> &cases) {
  Context ctx;
  for (const OverlapCase &k : cases) {
    INFO(function_name(fn) << ": " << std::string(k.a) << " and " << std::string(k.b) << " " << k.shift_bytes << " bytes apart");
    auto c = make_call(ctx, fn, s);
    share(*c, k.a, k.b, k.shift_bytes);
    if (k.message)
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {k.message});
    else
      CHECK_MESSAGE(c->run() == XVK_SUCCESS, last_error());
  }
}

// `output` given as `input` itself (the same descriptor): accepted, and every
// output is bitwise what the out-of-place call writes.
void check_in_place(Fn fn, const Setup &s, const std::vector<std::pair<std::string, std::string>> &pairs) {
  Context ctx;
  auto ref = make_call(ctx, fn, s);
  REQUIRE_MESSAGE(ref->run() == XVK_SUCCESS, last_error());
  std::string what;
  for (const auto &p : pairs) what += p.first + " == " + p.second + "; ";
  INFO(function_name(fn) << ": " << what);
  auto c = make_call(ctx, fn, s);  // the same seed: the same inputs
  for (const auto &p : pairs) c->arg(p.first).desc = c->tensor(p.second).desc();
  REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
  for (const auto &p : pairs)
    CHECK_MESSAGE(c->tensor(p.second).snapshot() == ref->tensor(p.first).snapshot(),
                  p.first << " written over " << p.second << " differs from the out-of-place result");
  for (auto &a : c->args) {
    const bool aliased = std::any_of(pairs.begin(), pairs.end(), [&](const auto &p) { return p.first == a->name; });
    if (a->output && a->desc.present() && !aliased)
      CHECK_MESSAGE(a->tensor->snapshot() == ref->tensor(a->name).snapshot(), a->name << " differs");
  }
}

}  // namespace

// ===========================================================================
// Valid calls
// ===========================================================================

TEST_CASE("batch_norm: a valid call of each entry point succeeds and writes all of its outputs") {
  Context ctx;
  for (Fn fn : kAllFns)
    for (DType dt : kAllDtypes)
      for (bool last : {false, true})
        for (bool relu : {false, true}) {
          Setup s;
          s.dtype = dt;
          s.channels_last = last;
          s.relu = relu;
          INFO(function_name(fn) << " " << std::string(dtype_name(dt))
                                 << std::string(last ? " channels-last" : " channels-first")
                                 << std::string(relu ? " relu" : ""));
          auto c = make_call(ctx, fn, s);
          expect_valid_call(*c);
          if (fn == Fn::backward && relu) {
            s.backward_uses_y = true;
            INFO("with y instead of the mask");
            auto d = make_call(ctx, fn, s);
            expect_valid_call(*d);
          }
        }
}

TEST_CASE("batch_norm: the (N, C) case, channel_axis -1 and channel vectors of any shape") {
  Context ctx;
  for (Fn fn : kAllFns) {
    INFO(function_name(fn));
    Setup s;
    s.shape = {5, 7};  // 35 elements, 2 mask words
    for (int32_t axis : {1, -1}) {
      s.channel_axis = axis;
      INFO("channel_axis " << axis);
      auto c = make_call(ctx, fn, s);
      expect_valid_call(*c);
    }
    // A per-channel vector may have any shape of C elements.
    auto c = make_call(ctx, fn);
    for (auto &a : c->args)
      if (a->role == Role::chan) a->desc.set_shape({1, 3, 1});
    c->arg("mask").desc.set_shape({2, 2});  // the mask too: any shape of its word count
    expect_valid_call(*c);
  }
}

// ===========================================================================
// Every tensor argument
// ===========================================================================

TEST_CASE("batch_norm_forward_training: every tensor argument is validated") {
  check_every_tensor_argument(Fn::training, {Setup{}, channels_last_setup()});
}

TEST_CASE("batch_norm_forward_inference: every tensor argument is validated") {
  check_every_tensor_argument(Fn::inference, {Setup{}, channels_last_setup()});
}

TEST_CASE("batch_norm_backward: every tensor argument is validated") {
  Setup with_y;
  with_y.backward_uses_y = true;
  check_every_tensor_argument(Fn::backward, {Setup{}, channels_last_setup(), with_y});
}

TEST_CASE("batch_norm: a mismatch with the reference names both tensors") {
  Context ctx;
  SUBCASE("forward: x in bfloat16 against y in float16") {
    for (Fn fn : {Fn::training, Fn::inference}) {
      auto c = make_call(ctx, fn);
      c->arg("z").desc.set_present(false);
      c->arg("x").desc.t().dtype = dl_dtype(DType::bf16);
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"y has dtype float16, expected bfloat16 (the dtype of x)"});
    }
  }
  SUBCASE("backward: x has dy's shape") {
    auto c = make_call(ctx, Fn::backward);
    c->arg("dy").desc.shape()[1] = 2;
    c->arg("dy").desc.resync();
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"x has shape [2, 3, 4, 5], expected [2, 2, 4, 5] (the shape of dy)"});
  }
  SUBCASE("forward: z's memory order") {
    auto c = make_call(ctx, Fn::training, channels_last_setup());
    c->arg("z").desc.clear_strides();
    c->expect(XVK_ERROR_INVALID_ARGUMENT,
              {"z's strides do not give x's memory order (dense channels-last: N, spatial, C)"});
  }
}

TEST_CASE("batch_norm: the mask may be uint32 or int32, and any other dtype is rejected") {
  Context ctx;
  for (Fn fn : kAllFns) {
    INFO(function_name(fn));
    auto u = make_call(ctx, fn), i = make_call(ctx, fn);
    i->arg("mask").desc.t().dtype = kInt32;
    REQUIRE_MESSAGE(u->run() == XVK_SUCCESS, last_error());
    expect_valid_call(*i);
    for (auto &a : u->args)
      if (a->output) CHECK_MESSAGE(a->tensor->snapshot() == i->tensor(a->name).snapshot(), a->name << " differs");
  }
}

// ===========================================================================
// Arguments that go together
// ===========================================================================

TEST_CASE("batch_norm: mask and y need XVK_ACTIVATION_RELU") {
  Context ctx;
  Setup none;
  none.relu = false;
  for (Fn fn : {Fn::training, Fn::inference}) {
    INFO(function_name(fn));
    auto c = make_call(ctx, fn, none);
    c->arg("mask").desc.set_present(true);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"mask is given but options->activation is not XVK_ACTIVATION_RELU"});
  }
  {
    auto c = make_call(ctx, Fn::backward, none);
    c->arg("mask").desc.set_present(true);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"mask is given but options->activation is not XVK_ACTIVATION_RELU"});
  }
  {
    auto c = make_call(ctx, Fn::backward, none);
    c->arg("y").desc.set_present(true);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"y is given but options->activation is not XVK_ACTIVATION_RELU"});
  }
  {
    auto c = make_call(ctx, Fn::backward, none);
    c->arg("y").desc.set_present(true);
    c->arg("mask").desc.set_present(true);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"is given but options->activation is not XVK_ACTIVATION_RELU"});
  }
}

TEST_CASE("batch_norm_backward: RELU needs exactly one of mask and y") {
  Context ctx;
  {
    auto c = make_call(ctx, Fn::backward);
    c->arg("y").desc.set_present(true);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"mask and y are both given; pass exactly one"});
  }
  {
    auto c = make_call(ctx, Fn::backward);
    c->arg("mask").desc.set_present(false);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"mask and y are both NULL; XVK_ACTIVATION_RELU needs one of them"});
  }
}

TEST_CASE("batch_norm: statistics that are required or come in pairs") {
  Context ctx;
  SUBCASE("training: running_mean and running_var together or not at all") {
    for (const char *given : {"running_mean", "running_var"}) {
      auto c = make_call(ctx, Fn::training);
      const std::string other = std::string(given) == "running_mean" ? "running_var" : "running_mean";
      c->arg(other).desc.set_present(false);
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {std::string(given) + " is given but " + other + " is NULL; pass both or neither"});
    }
  }
  SUBCASE("inference: the running statistics are required") {
    for (const char *missing : {"running_mean", "running_var"}) {
      auto c = make_call(ctx, Fn::inference);
      c->arg(missing).desc.set_present(false);
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {std::string(missing) + " is NULL; inference needs the running statistics"});
    }
    auto c = make_call(ctx, Fn::inference);
    c->arg("running_mean").desc.set_present(false);
    c->arg("running_var").desc.set_present(false);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"running_mean is NULL; inference needs the running statistics"});
  }
  SUBCASE("backward: the saved statistics are required") {
    for (const char *missing : {"saved_mean", "saved_rstd"}) {
      auto c = make_call(ctx, Fn::backward);
      c->arg(missing).desc.set_present(false);
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {std::string(missing) + " is NULL; the backward needs the forward's saved statistics"});
    }
    auto c = make_call(ctx, Fn::backward);
    c->arg("saved_mean").desc.set_present(false);
    c->arg("saved_rstd").desc.set_present(false);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"saved_mean is NULL"});
  }
}

TEST_CASE("batch_norm: optional arguments may each be absent") {
  Context ctx;
  const std::vector<std::pair<Fn, std::vector<std::vector<std::string>>>> optional = {
      {Fn::training,
       {{"z"}, {"gamma"}, {"beta"}, {"mask"}, {"running_mean", "running_var"}, {"saved_mean"}, {"saved_rstd"}}},
      {Fn::inference, {{"z"}, {"gamma"}, {"beta"}, {"mask"}}},
      {Fn::backward, {{"gamma"}, {"dz"}, {"dgamma"}, {"dbeta"}}},
  };
  for (const auto &entry : optional) {
    const Fn fn = entry.first;
    const auto &sets = entry.second;
    auto ref = make_call(ctx, fn);
    REQUIRE_MESSAGE(ref->run() == XVK_SUCCESS, last_error());
    for (const auto &names : sets) {
      std::string what;
      for (const auto &n : names) what += n + " ";
      INFO(function_name(fn) << " without " << what);
      auto c = make_call(ctx, fn);
      for (const auto &n : names) c->arg(n).desc.set_present(false);
      expect_valid_call(*c);  // the absent ones unchanged, the others written
      // Outputs that do not depend on an absent output are as with it.
      if (c->arg(names[0]).output)
        for (auto &a : c->args)
          if (a->output && a->desc.present())
            CHECK_MESSAGE(a->tensor->snapshot() == ref->tensor(a->name).snapshot(), a->name << " differs");
    }
  }
}

// ===========================================================================
// Options
// ===========================================================================

TEST_CASE("batch_norm: options->struct_size") {
  Context ctx;
  CHECK(sizeof(xvk_batch_norm_options) == 20);
  const std::string size = std::to_string(sizeof(xvk_batch_norm_options));
  for (Fn fn : kAllFns)
    for (uint32_t bad : {0u, 4u, 16u, 19u, 21u, 24u, 0xffffffffu}) {
      INFO(function_name(fn) << ": struct_size " << bad);
      auto c = make_call(ctx, fn);
      c->options.struct_size = bad;
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->struct_size is " + std::to_string(bad) + "; expected " +
                                                 size + " to " + size,
                                             "sizeof(xvk_batch_norm_options)"});
    }
}

TEST_CASE("batch_norm: NULL options mean the defaults") {
  Context ctx;
  Setup s;
  s.relu = false;  // the default activation: no mask
  for (Fn fn : kAllFns) {
    INFO(function_name(fn));
    auto a = make_call(ctx, fn, s), b = make_call(ctx, fn, s);
    a->null_options = true;  // b: XVK_BATCH_NORM_OPTIONS_INIT
    expect_valid_call(*a);
    REQUIRE(b->run() == XVK_SUCCESS);
    for (auto &arg : a->args)
      if (arg->output) CHECK_MESSAGE(arg->tensor->snapshot() == b->tensor(arg->name).snapshot(), arg->name);
  }
}

TEST_CASE("batch_norm: options->epsilon must be finite and > 0") {
  Context ctx;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (Fn fn : kAllFns)
    for (float eps : {0.0f, -0.0f, -1e-5f, -inf, inf, nan}) {
      INFO(function_name(fn) << ": epsilon " << eps);
      auto c = make_call(ctx, fn);
      c->options.epsilon = eps;
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->epsilon is", "expected a finite number > 0"});
    }
  for (Fn fn : kAllFns) {
    INFO(function_name(fn) << ": the smallest positive float is accepted");
    auto c = make_call(ctx, fn);
    c->options.epsilon = std::numeric_limits<float>::denorm_min();
    CHECK_MESSAGE(c->run() == XVK_SUCCESS, last_error());
  }
}

TEST_CASE("batch_norm: options->momentum must be in [0, 1]") {
  Context ctx;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (Fn fn : kAllFns)
    for (float momentum : {-1e-7f, -0.5f, std::nextafter(1.0f, 2.0f), 2.0f, -inf, inf, nan}) {
      INFO(function_name(fn) << ": momentum " << momentum);
      auto c = make_call(ctx, fn);
      c->options.momentum = momentum;
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->momentum is", "expected a number in [0, 1]"});
    }
  SUBCASE("momentum 0 leaves the running statistics as they were") {
    for (float zero : {0.0f, -0.0f}) {
      auto c = make_call(ctx, Fn::training);
      c->options.momentum = zero;
      const Bytes mean = c->tensor("running_mean").snapshot(), var = c->tensor("running_var").snapshot();
      REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
      CHECK(c->tensor("running_mean").snapshot() == mean);
      CHECK(c->tensor("running_var").snapshot() == var);
    }
  }
  SUBCASE("momentum 1 replaces the running mean with the batch mean") {
    auto c = make_call(ctx, Fn::training);
    c->options.momentum = 1.0f;
    REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
    CHECK(c->tensor("running_mean").read() == c->tensor("saved_mean").read());
  }
}

TEST_CASE("batch_norm: options->activation must be an xvk_activation_t") {
  Context ctx;
  for (Fn fn : kAllFns)
    for (int32_t act : {-1, 2, 100}) {
      INFO(function_name(fn) << ": activation " << act);
      auto c = make_call(ctx, fn);
      c->options.activation = act;
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->activation is " + std::to_string(act) +
                                             "; expected XVK_ACTIVATION_NONE or XVK_ACTIVATION_RELU"});
    }
}

TEST_CASE("batch_norm: options->channel_axis is 1, -1 or ndim - 1") {
  Context ctx;
  for (Fn fn : kAllFns)
    for (int32_t axis : {0, 2, -2, -4, 4, 100, std::numeric_limits<int32_t>::min()}) {
      INFO(function_name(fn) << ": channel_axis " << axis);
      auto c = make_call(ctx, fn);
      c->options.channel_axis = axis;
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {"options->channel_axis is " + std::to_string(axis) + "; expected 1, -1 or 3"});
    }
  SUBCASE("-1 and ndim - 1 over (N, H, W, C) read the same memory as 1 over channels-last (N, C, H, W)") {
    for (Fn fn : kAllFns)
      for (int32_t axis : {-1, 3}) {
        INFO(function_name(fn) << ": channel_axis " << axis);
        auto a = make_call(ctx, fn, channels_last_setup());  // [2, 3, 4, 5] with channels-last strides
        Setup s;
        s.shape = {2, 4, 5, 3};
        s.channel_axis = axis;
        s.channels_last = true;  // (N, H, W, C) row-major: NULL strides, the same memory order
        auto b = make_call(ctx, fn, s);
        for (auto &arg : a->args) b->tensor(arg->name).restore(arg->tensor->snapshot());
        REQUIRE_MESSAGE(a->run() == XVK_SUCCESS, last_error());
        expect_valid_call(*b);
        for (auto &arg : a->args)
          if (arg->output)
            CHECK_MESSAGE(arg->tensor->snapshot() == b->tensor(arg->name).snapshot(), arg->name << " differs");
      }
  }
}

TEST_CASE("batch_norm: x needs at least 2 dimensions") {
  Context ctx;
  for (Fn fn : kAllFns)
    for (int ndim : {0, 1}) {
      INFO(function_name(fn) << ": ndim " << ndim);
      auto c = make_call(ctx, fn);
      for (auto &a : c->args)
        if (a->role == Role::act) {
          a->desc.clear_strides();
          a->desc.set_shape(ndim ? std::vector<int64_t>{120} : std::vector<int64_t>{});
        }
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {c->reference() + " has " + std::to_string(ndim) +
                                             " dimension(s); BatchNorm needs at least 2 (N, C, ...)"});
    }
}

// ===========================================================================
// Values per channel and empty tensors
// ===========================================================================

TEST_CASE("batch_norm: training and its backward need more than 1 value per channel") {
  Context ctx;
  const std::vector<std::pair<std::vector<int64_t>, int32_t>> one_value = {
      {{1, 3}, 1}, {{1, 3, 1, 1}, 1}, {{1, 1, 1, 3}, -1}};
  for (const auto &entry : one_value) {
    Setup s;
    s.shape = entry.first;
    s.channel_axis = entry.second;
    INFO("x " << shape_string(s.shape) << ", channel_axis " << s.channel_axis);
    make_call(ctx, Fn::training, s)
        ->expect(XVK_ERROR_INVALID_ARGUMENT, {"x has 1 value(s) per channel; training needs more than 1"});
    make_call(ctx, Fn::backward, s)
        ->expect(XVK_ERROR_INVALID_ARGUMENT,
                 {"has 1 value(s) per channel; the backward of training needs more than 1"});
    auto inference = make_call(ctx, Fn::inference, s);  // 1 value per channel is fine here
    expect_valid_call(*inference);
  }
  Setup two;
  two.shape = {2, 3};
  for (Fn fn : kAllFns) {
    INFO(function_name(fn) << " over 2 values per channel");
    auto c = make_call(ctx, fn, two);
    expect_valid_call(*c);
  }
}

TEST_CASE("batch_norm: C == 0 succeeds and writes nothing") {
  Context ctx;
  for (Fn fn : kAllFns)
    for (bool last : {false, true})
      for (bool null_data : {false, true}) {
        Setup s;
        s.shape = {2, 0, 4, 5};
        s.channels_last = last;
        INFO(function_name(fn) << std::string(last ? " channels-last" : " channels-first")
                                 << std::string(null_data ? " data NULL" : ""));
        auto c = make_call(ctx, fn, s);
        if (null_data)
          for (auto &a : c->args) a->desc.t().data = nullptr;
        expect_success_writes_nothing(*c);
      }
}

TEST_CASE("batch_norm: N == 0 succeeds in inference and fails in training and backward") {
  Context ctx;
  for (const std::vector<int64_t> &shape : {std::vector<int64_t>{0, 3, 4, 5}, std::vector<int64_t>{2, 3, 0, 5}}) {
    Setup s;
    s.shape = shape;
    INFO("x " << shape_string(shape));
    auto inference = make_call(ctx, Fn::inference, s);
    expect_success_writes_nothing(*inference);
    make_call(ctx, Fn::training, s)
        ->expect(XVK_ERROR_INVALID_ARGUMENT, {"x has 0 value(s) per channel; training needs more than 1"});
    make_call(ctx, Fn::backward, s)
        ->expect(XVK_ERROR_INVALID_ARGUMENT,
                 {"has 0 value(s) per channel; the backward of training needs more than 1"});
  }
}

TEST_CASE("batch_norm: empty tensors still have their arguments validated") {
  Context ctx;
  Setup c0;
  c0.shape = {2, 0, 4, 5};  // 0 channels, 0 mask words
  Setup n0;
  n0.shape = {0, 3, 4, 5};  // inference only: 3 channels, 0 mask words
  for (Fn fn : kAllFns) {
    INFO(function_name(fn));
    const std::string out = fn == Fn::backward ? "dx" : "y";
    {
      auto c = make_call(ctx, fn, c0);
      c->arg(out).desc.t().dtype = dl_dtype(DType::f32);
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {out + " has dtype float32, expected float16 (the dtype of " + c->reference() + ")"});
    }
    {
      auto c = make_call(ctx, fn, c0);
      c->arg("gamma").desc.set_shape({1});
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"gamma has 1 elements, expected 0 (the number of channels)"});
    }
    {
      auto c = make_call(ctx, fn, c0);
      c->arg("mask").desc.set_shape({1});
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"mask has 1 elements, expected 0"});
    }
    {
      auto c = make_call(ctx, fn, c0);
      c->options.epsilon = 0.0f;
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->epsilon is 0"});
    }
  }
  {
    auto c = make_call(ctx, Fn::inference, n0);
    c->arg("mask").desc.set_shape({1});
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"mask has 1 elements, expected 0"});
  }
  {
    auto c = make_call(ctx, Fn::inference, n0);
    c->arg("running_var").desc.set_present(false);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"running_var is NULL"});
  }
  // An empty tensor addresses nothing, so its strides are not checked (PyTorch
  // gives size-0 dimensions the strides of size 1).
  {
    auto c = make_call(ctx, Fn::inference, n0);
    c->arg("y").desc.set_strides({60, 1, 15, 3});
    CHECK(c->run() == XVK_SUCCESS);
  }
}

TEST_CASE("batch_norm: where C == 1 or there is no spatial extent, both memory orders are one") {
  // PyTorch's channels_last strides of such shapes describe the same bytes as
  // the contiguous ones: an activation tensor may carry either.
  Context ctx;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{2, 1, 4, 5}, {20, 1, 5, 1}},  // C == 1
      {{2, 3, 1, 1}, {3, 1, 3, 3}},   // spatial == 1
  };
  for (const auto &entry : cases)
    for (Fn fn : kAllFns) {
      Setup s;
      s.shape = entry.first;
      INFO(function_name(fn) << ": x " << shape_string(s.shape) << " contiguous, the others with strides "
                             << shape_string(entry.second));
      auto ref = make_call(ctx, fn, s);
      REQUIRE_MESSAGE(ref->run() == XVK_SUCCESS, last_error());
      auto c = make_call(ctx, fn, s);
      for (auto &a : c->args)
        if (a->role == Role::act && !a->reference) a->desc.set_strides(entry.second);
      expect_valid_call(*c);
      for (auto &a : c->args)
        if (a->output) CHECK_MESSAGE(a->tensor->snapshot() == ref->tensor(a->name).snapshot(), a->name << " differs");
    }
}

// ===========================================================================
// Shared memory and in-place use
// ===========================================================================

TEST_CASE("batch_norm forward: y may be x or z") {
  for (Fn fn : {Fn::training, Fn::inference})
    for (const Setup &s : {Setup{}, channels_last_setup()}) {
      check_in_place(fn, s, {{"y", "x"}});
      check_in_place(fn, s, {{"y", "z"}});
    }
  SUBCASE("y on x's memory under a different but equivalent descriptor") {
    Context ctx;
    auto ref = make_call(ctx, Fn::training);
    REQUIRE(ref->run() == XVK_SUCCESS);
    auto c = make_call(ctx, Fn::training);
    c->arg("y").desc = c->tensor("x").desc();
    c->arg("y").desc.set_strides({60, 20, 5, 1});  // x has NULL strides
    REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
    CHECK(c->tensor("x").snapshot() == ref->tensor("y").snapshot());
  }
}

TEST_CASE("batch_norm_forward_training: no other output may share memory") {
  // Activations are float16 (240 bytes), channel vectors 3 floats (12 bytes), the mask 4 words (16 bytes).
  check_overlaps(Fn::training, Setup{},
                 {
                     {"x", "y", 2, "y shares memory with x"},
                     {"x", "y", -2, "y shares memory with x"},
                     {"x", "y", 236, "y shares memory with x"},
                     {"z", "y", 4, "y shares memory with z"},
                     {"gamma", "y", 0, "y shares memory with gamma"},
                     {"beta", "y", -4, "y shares memory with beta"},
                     {"y", "mask", 0, "y and mask are outputs that share memory"},
                     {"y", "mask", 224, "y and mask are outputs that share memory"},
                     {"x", "mask", 8, "mask shares memory with x"},
                     {"running_mean", "running_var", 0, "running_mean and running_var are outputs that share memory"},
                     {"running_mean", "running_var", 8, "running_mean and running_var are outputs that share memory"},
                     {"running_mean", "gamma", 0, "running_mean shares memory with gamma"},
                     {"running_var", "x", 4, "running_var shares memory with x"},
                     {"running_mean", "saved_mean", 0, "running_mean and saved_mean are outputs that share memory"},
                     {"saved_mean", "saved_rstd", 4, "saved_mean and saved_rstd are outputs that share memory"},
                     {"saved_rstd", "beta", 0, "saved_rstd shares memory with beta"},
                     {"y", "saved_rstd", 100, "y and saved_rstd are outputs that share memory"},
                     {"mask", "saved_mean", 12, "mask and saved_mean are outputs that share memory"},
                     // Neighbours that share no byte.
                     {"x", "y", 240, nullptr},
                     {"x", "y", -240, nullptr},
                     {"saved_mean", "saved_rstd", 12, nullptr},
                     {"running_mean", "running_var", -12, nullptr},
                     {"y", "mask", 240, nullptr},
                 });
}

TEST_CASE("batch_norm_forward_inference: no other output may share memory") {
  check_overlaps(Fn::inference, Setup{},
                 {
                     {"x", "y", 2, "y shares memory with x"},
                     {"z", "y", -2, "y shares memory with z"},
                     {"running_mean", "y", 0, "y shares memory with running_mean"},
                     {"running_var", "mask", 0, "mask shares memory with running_var"},
                     {"gamma", "mask", 4, "mask shares memory with gamma"},
                     {"y", "mask", 16, "y and mask are outputs that share memory"},
                     {"x", "mask", 0, "mask shares memory with x"},
                     {"x", "y", 240, nullptr},
                     {"running_mean", "y", 12, nullptr},
                 });
}

TEST_CASE("batch_norm_backward: dx may be dy or x, dz may be dy") {
  for (const Setup &s : {Setup{}, channels_last_setup()}) {
    check_in_place(Fn::backward, s, {{"dx", "dy"}});
    check_in_place(Fn::backward, s, {{"dx", "x"}});
    check_in_place(Fn::backward, s, {{"dz", "dy"}});
    check_in_place(Fn::backward, s, {{"dx", "x"}, {"dz", "dy"}});
  }
}

TEST_CASE("batch_norm_backward: no other output may share memory") {
  check_overlaps(Fn::backward, Setup{},
                 {
                     {"dy", "dx", 2, "dx shares memory with dy"},
                     {"x", "dx", -2, "dx shares memory with x"},
                     {"x", "dz", 0, "dz shares memory with x"},
                     {"dy", "dz", 6, "dz shares memory with dy"},
                     {"dx", "dz", 0, "dx and dz are outputs that share memory"},
                     {"mask", "dx", 0, "dx shares memory with mask"},
                     {"gamma", "dgamma", 0, "dgamma shares memory with gamma"},
                     {"saved_mean", "dgamma", 4, "dgamma shares memory with saved_mean"},
                     {"saved_rstd", "dbeta", 0, "dbeta shares memory with saved_rstd"},
                     {"dgamma", "dbeta", 0, "dgamma and dbeta are outputs that share memory"},
                     {"dx", "dbeta", 120, "dx and dbeta are outputs that share memory"},
                     {"dy", "dgamma", 8, "dgamma shares memory with dy"},
                     {"dx", "dy", 240, nullptr},
                     {"dgamma", "dbeta", 12, nullptr},
                 });
  Setup with_y;
  with_y.backward_uses_y = true;
  check_overlaps(Fn::backward, with_y,
                 {
                     {"y", "dx", 0, "dx shares memory with y"},
                     {"y", "dz", 0, "dz shares memory with y"},
                     {"y", "dz", 240, nullptr},
                 });
  SUBCASE("dx and dz both on dy") {
    Context ctx;
    auto c = make_call(ctx, Fn::backward);
    c->arg("dx").desc = c->tensor("dy").desc();
    c->arg("dz").desc = c->tensor("dy").desc();
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"dx and dz are outputs that share memory"});
  }
  SUBCASE("dz on x (only dx may be x)") {
    Context ctx;
    auto c = make_call(ctx, Fn::backward);
    c->arg("dz").desc = c->tensor("x").desc();
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"dz shares memory with x"});
  }
}

// ===========================================================================
// Contexts
// ===========================================================================

TEST_CASE("batch_norm: NULL and destroyed contexts") {
  Context owner;
  xvk_context *destroyed = nullptr;
  REQUIRE(xvk_context_create(XVK_BACKEND_CPU, 0, &destroyed) == XVK_SUCCESS);
  REQUIRE(xvk_context_destroy(destroyed) == XVK_SUCCESS);
  for (Fn fn : kAllFns)
    for (xvk_context *bad : {static_cast<xvk_context *>(nullptr), destroyed}) {
      INFO(function_name(fn) << std::string(bad ? ": destroyed" : ": NULL"));
      auto c = make_call(owner, fn);
      c->ctx = bad;
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {bad ? "ctx is not a live context" : "ctx is NULL"});
    }
}

// ===========================================================================
// xvk_batch_norm_mask_words
// ===========================================================================

TEST_CASE("xvk_batch_norm_mask_words: ceil(elements / 32)") {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{}, 1},          {{0}, 0},     {{1}, 1},          {{31}, 1},          {{32}, 1},
      {{33}, 2},        {{64}, 2},    {{65}, 3},         {{2, 3, 4, 5}, 4},  {{3, 11}, 2},
      {{7, 0, 3}, 0},   {{1, 1, 1}, 1}, {{1000, 1000}, 31250}, {{int64_t(1) << 20, int64_t(1) << 20}, int64_t(1) << 35},
      {{int64_t(1) << 31, int64_t(1) << 31}, int64_t(1) << 57},
      {{std::numeric_limits<int64_t>::max()}, int64_t(1) << 58},
  };
  for (const auto &entry : cases) {
    std::vector<int64_t> dims = entry.first;
    const int64_t words = entry.second;
    INFO("shape " << shape_string(dims));
    // Only the shape counts: no data, a dtype and device no operator takes, odd strides and offset.
    DLTensor x{nullptr, {kDLCUDA, 3}, int32_t(dims.size()), DLDataType{kDLInt, 8, 1},
               dims.empty() ? nullptr : dims.data(), nullptr, 3};
    std::vector<int64_t> strides(dims.size(), 7);
    x.strides = strides.empty() ? nullptr : strides.data();
    int64_t got = -7;
    REQUIRE_MESSAGE(xvk_batch_norm_mask_words(&x, &got) == XVK_SUCCESS, last_error());
    CHECK(got == words);
  }
}

TEST_CASE("xvk_batch_norm_mask_words: bad arguments") {
  const std::string fn = "xvk_batch_norm_mask_words";
  std::vector<int64_t> dims = {2, 3, 4, 5};
  DLTensor x{nullptr, {kDLCPU, 0}, 4, dl_dtype(DType::f32), dims.data(), nullptr, 0};
  int64_t words = -7;
  auto expect = [&](const std::string &part, const std::function<xvk_status_t()> &call) {
    words = -7;
    expect_error(fn, XVK_ERROR_INVALID_ARGUMENT, {part}, {}, call);
    CHECK_MESSAGE(words == -7, "words was written by a failing call");
  };
  expect("x is NULL", [&] { return xvk_batch_norm_mask_words(nullptr, &words); });
  expect("words is NULL", [&] { return xvk_batch_norm_mask_words(&x, nullptr); });
  expect("x is NULL", [&] { return xvk_batch_norm_mask_words(nullptr, nullptr); });
  {
    DLTensor bad = x;
    bad.ndim = -1;
    expect("x has ndim -1; expected 0 to 64", [&] { return xvk_batch_norm_mask_words(&bad, &words); });
    bad.ndim = 65;
    expect("x has ndim 65; expected 0 to 64", [&] { return xvk_batch_norm_mask_words(&bad, &words); });
  }
  {
    DLTensor bad = x;
    bad.shape = nullptr;
    expect("x->shape is NULL", [&] { return xvk_batch_norm_mask_words(&bad, &words); });
  }
  for (int k = 0; k < 4; ++k) {
    std::vector<int64_t> neg = dims;
    neg[size_t(k)] = -1;
    DLTensor bad = x;
    bad.shape = neg.data();
    INFO("dimension " << k);
    expect("x has a negative size -1 in dimension " + std::to_string(k),
           [&] { return xvk_batch_norm_mask_words(&bad, &words); });
  }
  {
    std::vector<int64_t> huge = {std::numeric_limits<int64_t>::max(), 2};
    DLTensor bad = x;
    bad.ndim = 2;
    bad.shape = huge.data();
    expect("x has more elements than fit in 64 bits", [&] { return xvk_batch_norm_mask_words(&bad, &words); });
  }
}

// ===========================================================================
// Defects found by this suite (see the file's head: should_fail)
// ===========================================================================

// PyTorch gives an empty contiguous tensor the strides of its shape with
// every 0 taken as 1 (torch.empty(2, 0, 4, 5).stride() == (20, 20, 5, 1)),
// and its DLPack export carries them. No element is addressed, so any
// strides describe the same (empty) tensor; the library rejects these.
TEST_CASE("batch_norm: empty tensors with PyTorch's strides succeed and write nothing") {
  Context ctx;
  struct Case {
    Fn fn;
    std::vector<int64_t> shape, strides;
  };
  const Case cases[] = {
      {Fn::training, {2, 0, 4, 5}, {20, 20, 5, 1}},   // C == 0
      {Fn::inference, {2, 0, 4, 5}, {20, 20, 5, 1}},  // C == 0
      {Fn::backward, {2, 0, 4, 5}, {20, 20, 5, 1}},   // C == 0
      {Fn::inference, {2, 3, 0, 5}, {15, 5, 5, 1}},   // H == 0
  };
  for (const Case &k : cases) {
    INFO(function_name(k.fn) << ": x " << shape_string(k.shape) << " with strides " << shape_string(k.strides));
    Setup s;
    s.shape = k.shape;
    auto c = make_call(ctx, k.fn, s);
    for (auto &a : c->args)
      if (a->role == Role::act) a->desc.set_strides(k.strides);
    expect_success_writes_nothing(*c);
  }
}

// In the backward the tensors must have dy's memory order, but the message
// says "x's memory order" even about x itself.
TEST_CASE("batch_norm_backward: a memory-order mismatch names dy, not x") {
  Context ctx;
  for (const char *name : {"x", "dx"}) {
    INFO(std::string(name));
    auto c = make_call(ctx, Fn::backward);
    c->arg(name).desc.set_strides({60, 1, 15, 3});  // channels-last; dy is channels-first
    c->expect(XVK_ERROR_INVALID_ARGUMENT,
              {std::string(name) + "'s strides do not give dy's memory order (dense channels-first: N, C, spatial)"});
  }
}
