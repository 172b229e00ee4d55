// API validation: every public entry point, every bad argument.
//
// Each failing call is checked for
//   - the exact status,
//   - a fresh message (we first provoke a different, known failure) that
//     starts with the entry point's name and names the offending argument,
//   - every buffer the call could write (and every input) byte-for-byte
//     unchanged.
// Each operator's valid call is run first and must succeed and write all of
// its outputs, so a rejection is caused by the one thing a check changes.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

using namespace xvk_test;

namespace {

std::string last_error() { return xvk_last_error_message(); }

// Leaves a known message behind, so that a check can tell a fresh message
// from one left by an earlier call.
void stale_error() {
  REQUIRE(xvk_context_synchronize(nullptr) == XVK_ERROR_INVALID_ARGUMENT);
  REQUIRE(last_error() == "xvk_context_synchronize: ctx is NULL");
}

bool has_nan(const std::vector<float> &v) {
  for (float f : v)
    if (std::isnan(f)) return true;
  return false;
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

// A stack object that is not a context.
struct FakeContext {
  alignas(64) unsigned char bytes[256] = {};
  xvk_context *get() { return reinterpret_cast<xvk_context *>(bytes); }
};

// ---------------------------------------------------------------------------
// One operator call, with every argument held so that a check can change one.
// ---------------------------------------------------------------------------

enum class Kind { rows, vector, stats };

struct Arg {
  std::string name;  // as the messages name it ("x", "options->mask", "gamma")
  Kind kind = Kind::rows;
  bool output = false, required = true;
  bool reference = false;  // the tensor others are compared with (x, dy, y): its mismatches name the others
  std::unique_ptr<Tensor> tensor;
  TensorDesc desc;
  void reset() { desc = tensor->desc(); }
};

struct OpCall {
  std::string function;
  xvk_context *ctx = nullptr;
  std::vector<std::unique_ptr<Arg>> args;
  bool null_options = false;
  xvk_softmax_options softmax = XVK_SOFTMAX_OPTIONS_INIT;
  xvk_layer_norm_options layer_norm = XVK_LAYER_NORM_OPTIONS_INIT;
  xvk_rms_norm_options rms_norm = XVK_RMS_NORM_OPTIONS_INIT;
  std::function<xvk_status_t(OpCall &)> invoke;

  Arg &arg(const std::string &name) {
    for (auto &a : args)
      if (a->name == name) return *a;
    FAIL("no argument " << name);
    throw 0;
  }
  bool has(const std::string &name) const {
    for (auto &a : args)
      if (a->name == name) return true;
    return false;
  }
  DLTensor *t(const std::string &name) { return has(name) ? arg(name).desc.get() : nullptr; }
  Tensor &tensor(const std::string &name) { return *arg(name).tensor; }
  xvk_status_t run() { return invoke(*this); }
  std::vector<const Tensor *> watched() const {
    std::vector<const Tensor *> out;
    for (auto &a : args) out.push_back(a->tensor.get());
    return out;
  }
  void reset() {
    for (auto &a : args) a->reset();
    null_options = false;
  }
  Arg &add(const std::string &name, Kind kind, bool output, bool required, std::vector<int64_t> shape, DType dtype,
           Rng &rng, bool positive = false) {
    auto a = std::make_unique<Arg>();
    a->name = name;
    a->kind = kind;
    a->output = output;
    a->required = required;
    a->tensor = std::make_unique<Tensor>(ctx, shape, dtype);
    if (!output) {
      const size_t n = size_t(product(shape));
      a->tensor->fill(positive ? rng.uniform(n, 0.5, 2.0, dtype) : rng.normal(n, 0.0, 1.0, dtype));
    }
    a->reset();
    args.push_back(std::move(a));
    return *args.back();
  }
  void expect(xvk_status_t status, const std::vector<std::string> &parts) {
    expect_error(function, status, parts, watched(), [&] { return run(); });
  }
};

// The argument tensors every builder uses: activations [2, 3, 10] in
// float16 (6 rows of 10), parameters in float32 (mixed precision),
// statistics float32 [6].
const std::vector<int64_t> kShape = {2, 3, 10};
constexpr DType kAct = DType::f16;
constexpr DType kParam = DType::f32;

using Builder = std::function<std::unique_ptr<OpCall>(xvk_context *)>;

std::unique_ptr<OpCall> softmax_forward_call(xvk_context *ctx, bool log) {
  auto c = std::make_unique<OpCall>();
  c->function = log ? "xvk_log_softmax_forward" : "xvk_softmax_forward";
  c->ctx = ctx;
  Rng rng(1);
  c->add("x", Kind::rows, false, true, kShape, kAct, rng).reference = true;
  c->add("y", Kind::rows, true, true, kShape, kAct, rng);
  c->add("options->mask", Kind::rows, false, false, {3, 10}, kAct, rng);
  c->invoke = [log](OpCall &o) {
    o.softmax.mask = o.t("options->mask");
    const xvk_softmax_options *opt = o.null_options ? nullptr : &o.softmax;
    return log ? xvk_log_softmax_forward(o.ctx, o.t("x"), opt, o.t("y"))
               : xvk_softmax_forward(o.ctx, o.t("x"), opt, o.t("y"));
  };
  return c;
}

std::unique_ptr<OpCall> softmax_backward_call(xvk_context *ctx, bool log) {
  auto c = std::make_unique<OpCall>();
  c->function = log ? "xvk_log_softmax_backward" : "xvk_softmax_backward";
  c->ctx = ctx;
  Rng rng(2);
  c->add("y", Kind::rows, false, true, kShape, kAct, rng).reference = true;
  c->add("dy", Kind::rows, false, true, kShape, kAct, rng);
  c->add("dx", Kind::rows, true, true, kShape, kAct, rng);
  c->invoke = [log](OpCall &o) {
    const xvk_softmax_options *opt = o.null_options ? nullptr : &o.softmax;
    return log ? xvk_log_softmax_backward(o.ctx, o.t("y"), o.t("dy"), opt, o.t("dx"))
               : xvk_softmax_backward(o.ctx, o.t("y"), o.t("dy"), opt, o.t("dx"));
  };
  return c;
}

std::unique_ptr<OpCall> norm_forward_call(xvk_context *ctx, bool rms) {
  auto c = std::make_unique<OpCall>();
  c->function = rms ? "xvk_rms_norm_forward" : "xvk_layer_norm_forward";
  c->ctx = ctx;
  Rng rng(3);
  c->add("x", Kind::rows, false, true, kShape, kAct, rng).reference = true;
  c->add("gamma", Kind::vector, false, false, {10}, kParam, rng);
  if (!rms) c->add("beta", Kind::vector, false, false, {10}, kParam, rng);
  c->add("options->residual", Kind::rows, false, false, kShape, kAct, rng);
  c->add("options->residual_out", Kind::rows, true, false, kShape, kAct, rng);
  c->add("y", Kind::rows, true, true, kShape, kAct, rng);
  if (!rms) c->add("mean", Kind::stats, true, false, {6}, DType::f32, rng);
  c->add("rstd", Kind::stats, true, false, {6}, DType::f32, rng);
  c->invoke = [rms](OpCall &o) {
    if (rms) {
      o.rms_norm.residual = o.t("options->residual");
      o.rms_norm.residual_out = o.t("options->residual_out");
      return xvk_rms_norm_forward(o.ctx, o.t("x"), o.t("gamma"), o.null_options ? nullptr : &o.rms_norm, o.t("y"),
                                  o.t("rstd"));
    }
    o.layer_norm.residual = o.t("options->residual");
    o.layer_norm.residual_out = o.t("options->residual_out");
    return xvk_layer_norm_forward(o.ctx, o.t("x"), o.t("gamma"), o.t("beta"),
                                  o.null_options ? nullptr : &o.layer_norm, o.t("y"), o.t("mean"), o.t("rstd"));
  };
  return c;
}

std::unique_ptr<OpCall> norm_backward_call(xvk_context *ctx, bool rms) {
  auto c = std::make_unique<OpCall>();
  c->function = rms ? "xvk_rms_norm_backward" : "xvk_layer_norm_backward";
  c->ctx = ctx;
  Rng rng(4);
  c->add("dy", Kind::rows, false, true, kShape, kAct, rng).reference = true;
  c->add("x", Kind::rows, false, true, kShape, kAct, rng);
  c->add("gamma", Kind::vector, false, false, {10}, kParam, rng);
  if (!rms) c->add("mean", Kind::stats, false, true, {6}, DType::f32, rng);
  c->add("rstd", Kind::stats, false, true, {6}, DType::f32, rng, true);
  c->add("dx", Kind::rows, true, true, kShape, kAct, rng);
  c->add("dgamma", Kind::vector, true, false, {10}, kParam, rng);
  if (!rms) c->add("dbeta", Kind::vector, true, false, {10}, kParam, rng);
  c->invoke = [rms](OpCall &o) {
    if (rms)
      return xvk_rms_norm_backward(o.ctx, o.t("dy"), o.t("x"), o.t("gamma"), o.t("rstd"),
                                   o.null_options ? nullptr : &o.rms_norm, o.t("dx"), o.t("dgamma"));
    return xvk_layer_norm_backward(o.ctx, o.t("dy"), o.t("x"), o.t("gamma"), o.t("mean"), o.t("rstd"),
                                   o.null_options ? nullptr : &o.layer_norm, o.t("dx"), o.t("dgamma"), o.t("dbeta"));
  };
  return c;
}

struct Op {
  std::string name;
  Builder build;
};

const std::vector<Op> &all_ops() {
  static const std::vector<Op> ops = {
      {"softmax_forward", [](xvk_context *c) { return softmax_forward_call(c, false); }},
      {"log_softmax_forward", [](xvk_context *c) { return softmax_forward_call(c, true); }},
      {"softmax_backward", [](xvk_context *c) { return softmax_backward_call(c, false); }},
      {"log_softmax_backward", [](xvk_context *c) { return softmax_backward_call(c, true); }},
      {"layer_norm_forward", [](xvk_context *c) { return norm_forward_call(c, false); }},
      {"layer_norm_backward", [](xvk_context *c) { return norm_backward_call(c, false); }},
      {"rms_norm_forward", [](xvk_context *c) { return norm_forward_call(c, true); }},
      {"rms_norm_backward", [](xvk_context *c) { return norm_backward_call(c, true); }},
  };
  return ops;
}

// Runs the unchanged call: it must succeed and write every output
// (outputs start poisoned with NaN, valid results here are finite).
void expect_valid_call_writes_outputs(OpCall &call) {
  for (auto &a : call.args)
    if (a->output) a->tensor->poison();
  stale_error();
  const xvk_status_t status = call.run();
  REQUIRE_MESSAGE(status == XVK_SUCCESS, call.function << " failed: " << last_error());
  CHECK(last_error() == "xvk_context_synchronize: ctx is NULL");  // success leaves the message alone
  for (auto &a : call.args)
    if (a->output && a->desc.present()) CHECK_MESSAGE(!has_nan(a->tensor->read()), a->name << " was not fully written");
}

// ---------------------------------------------------------------------------
// Mutations that make any tensor argument invalid, with the status and the
// message they must produce ("{}" stands for the argument's name).
// ---------------------------------------------------------------------------

struct Mutation {
  std::string what;
  std::function<bool(const Arg &)> applies;
  std::function<void(TensorDesc &, const Arg &)> apply;
  xvk_status_t status;
  std::function<std::string(const Arg &)> message;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int k = int(shape.size()) - 2; k >= 0; --k) s[size_t(k)] = s[size_t(k) + 1] * shape[size_t(k) + 1];
  return s;
}

std::vector<Mutation> tensor_mutations() {
  auto any = [](const Arg &) { return true; };
  auto rows_ge = [](size_t ndim) {
    return [ndim](const Arg &a) { return a.kind == Kind::rows && a.tensor->shape().size() >= ndim; };
  };
  auto text = [](std::string pattern) {
    return [pattern](const Arg &a) {
      std::string s = pattern;
      const size_t at = s.find("{}");
      return at == std::string::npos ? s : s.replace(at, 2, a.name);
    };
  };
  return {
      {"NULL", [](const Arg &a) { return a.required; }, [](TensorDesc &d, const Arg &) { d.set_present(false); },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is NULL")},
      {"ndim -1", any, [](TensorDesc &d, const Arg &) { d.t().ndim = -1; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{} has ndim -1; expected 0 to 64")},
      {"ndim 65", any, [](TensorDesc &d, const Arg &) { d.t().ndim = 65; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{} has ndim 65")},
      {"shape NULL", any, [](TensorDesc &d, const Arg &) { d.t().shape = nullptr; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{}->shape is NULL")},
      {"negative size", any,
       [](TensorDesc &d, const Arg &) {
         d.shape()[0] = -3;
         d.resync();
       },
       XVK_ERROR_INVALID_ARGUMENT, text("{} has a negative size -3 in dimension 0")},
      {"data NULL", any, [](TensorDesc &d, const Arg &) { d.t().data = nullptr; }, XVK_ERROR_INVALID_ARGUMENT,
       text("{}->data is NULL")},
      {"int8", any, [](TensorDesc &d, const Arg &) { d.t().dtype = DLDataType{kDLInt, 8, 1}; },
       XVK_ERROR_UNSUPPORTED, text("{} has dtype int8")},
      {"uint16", any, [](TensorDesc &d, const Arg &) { d.t().dtype = DLDataType{kDLUInt, 16, 1}; },
       XVK_ERROR_UNSUPPORTED, text("{} has dtype uint16")},
      {"float64", any, [](TensorDesc &d, const Arg &) { d.t().dtype = DLDataType{kDLFloat, 64, 1}; },
       XVK_ERROR_UNSUPPORTED, text("{} has dtype float64")},
      {"lanes 4", any, [](TensorDesc &d, const Arg &) { d.t().dtype.lanes = 4; }, XVK_ERROR_UNSUPPORTED,
       [](const Arg &a) {
         return a.name + " has dtype float" + std::to_string(dtype_size(a.tensor->dtype()) * 8) + "x4";
       }},
      {"a float dtype that does not match", [](const Arg &a) { return !a.reference; },
       [](TensorDesc &d, const Arg &) { d.t().dtype = dl_dtype(DType::bf16); }, XVK_ERROR_INVALID_ARGUMENT,
       text("{} has dtype bfloat16")},
      {"device type CUDA", any, [](TensorDesc &d, const Arg &) { d.t().device = DLDevice{kDLCUDA, 0}; },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is on device (kDLCUDA, 0); this cpu context is on (kDLCPU, 0)")},
      {"device type ROCm", any, [](TensorDesc &d, const Arg &) { d.t().device = DLDevice{kDLROCM, 0}; },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is on device (kDLROCM, 0)")},
      {"device id 1", any, [](TensorDesc &d, const Arg &) { d.t().device = DLDevice{kDLCPU, 1}; },
       XVK_ERROR_INVALID_ARGUMENT, text("{} is on device (kDLCPU, 1)")},
      {"misaligned byte_offset", any, [](TensorDesc &d, const Arg &) { d.t().byte_offset += 1; },
       XVK_ERROR_INVALID_ARGUMENT, text("{}'s address (data + byte_offset) is not aligned")},
      {"strided last dimension", any,
       [](TensorDesc &d, const Arg &a) {
         std::vector<int64_t> s = contiguous_strides(a.tensor->shape());
         for (auto &v : s) v *= 2;
         d.set_strides(s);
       },
       XVK_ERROR_UNSUPPORTED,
       [](const Arg &a) {
         return a.name + " has stride 2 in dimension " + std::to_string(a.tensor->shape().size() - 1) +
                ", expected 1";
       }},
      {"leading dimensions that do not collapse", rows_ge(3),
       [](TensorDesc &d, const Arg &a) {
         std::vector<int64_t> s = contiguous_strides(a.tensor->shape());
         s[0] += 1;
         d.set_strides(s);
       },
       XVK_ERROR_UNSUPPORTED, text("{} has stride 31 in dimension 0, expected 30")},
      {"negative leading stride", rows_ge(2),
       [](TensorDesc &d, const Arg &a) {
         std::vector<int64_t> s = contiguous_strides(a.tensor->shape());
         s[0] = -s[0];
         d.set_strides(s);
       },
       XVK_ERROR_UNSUPPORTED, text("{} has a negative stride in dimension 0")},
      {"negative stride of a vector", [](const Arg &a) { return a.kind != Kind::rows; },
       [](TensorDesc &d, const Arg &) { d.set_strides({-1}); }, XVK_ERROR_UNSUPPORTED,
       text("{} has stride -1 in dimension 0, expected 1")},
      {"wrong last dimension", [](const Arg &a) { return !a.reference; },
       [](TensorDesc &d, const Arg &) {
         d.shape().back() -= 1;
         d.resync();
       },
       XVK_ERROR_INVALID_ARGUMENT,
       [](const Arg &a) {
         if (a.name == "options->mask") return a.name + "'s last dimension is 9, expected 10 (x's last dimension)";
         if (a.kind == Kind::vector) return a.name + " has 9 elements, expected 10 (the normalized size)";
         if (a.kind == Kind::stats) return a.name + " has 5 elements, expected 6 (one per row)";
         return a.name + " has shape [2, 3, 9], expected [2, 3, 10]";
       }},
      {"wrong leading dimension", [](const Arg &a) { return !a.reference && a.tensor->shape().size() >= 2; },
       [](TensorDesc &d, const Arg &) {
         d.shape()[0] = 1;
         d.resync();
       },
       XVK_ERROR_INVALID_ARGUMENT,
       [](const Arg &a) {
         if (a.name == "options->mask") return std::string("options->mask has 3 dimension(s)");  // unused
         return a.name + " has shape [1, 3, 10], expected [2, 3, 10]";
       }},
      {"same element count in another shape",
       [](const Arg &a) { return !a.reference && a.kind == Kind::rows && a.name != "options->mask"; },
       [](TensorDesc &d, const Arg &) {
         d.clear_strides();
         d.set_shape({1, 2, 3, 10});
       }, XVK_ERROR_INVALID_ARGUMENT,
       text("{} has shape [1, 2, 3, 10], expected [2, 3, 10]")},
  };
}

void check_every_tensor_argument(const Op &op) {
  Context ctx;
  {
    auto valid = op.build(ctx);
    expect_valid_call_writes_outputs(*valid);
  }
  auto call = op.build(ctx);
  int checks = 0;
  for (const Mutation &m : tensor_mutations())
    for (auto &a : call->args) {
      if (!m.applies(*a)) continue;
      // A [3, 10] mask broadcast over [2, 3, 10]: a leading 1 is valid there.
      if (a->name == "options->mask" && m.what == "wrong leading dimension") continue;
      call->reset();
      m.apply(a->desc, *a);
      INFO(op.name << ": " << a->name << ": " << m.what);
      call->expect(m.status, {m.message(*a)});
      ++checks;
    }
  CHECK(checks >= 15 * int(call->args.size()));  // the mutations did apply
}

}  // namespace

// ===========================================================================
// Status, version, names
// ===========================================================================

TEST_CASE("xvk_status_string names every status") {
  CHECK(std::string(xvk_status_string(XVK_SUCCESS)) == "XVK_SUCCESS");
  CHECK(std::string(xvk_status_string(XVK_ERROR_INVALID_ARGUMENT)) == "XVK_ERROR_INVALID_ARGUMENT");
  CHECK(std::string(xvk_status_string(XVK_ERROR_UNSUPPORTED)) == "XVK_ERROR_UNSUPPORTED");
  CHECK(std::string(xvk_status_string(XVK_ERROR_BACKEND_UNAVAILABLE)) == "XVK_ERROR_BACKEND_UNAVAILABLE");
  CHECK(std::string(xvk_status_string(XVK_ERROR_OUT_OF_MEMORY)) == "XVK_ERROR_OUT_OF_MEMORY");
  CHECK(std::string(xvk_status_string(XVK_ERROR_DEVICE)) == "XVK_ERROR_DEVICE");
  CHECK(std::string(xvk_status_string(XVK_ERROR_INTERNAL)) == "XVK_ERROR_INTERNAL");
  // An unknown value still gives a static, non-NULL string (values outside
  // the C++ enum's range are exercised from C in c_header_test.c).
  const char *unknown = xvk_status_string(static_cast<xvk_status_t>(7));
  REQUIRE(unknown != nullptr);
  CHECK(std::string(unknown) == "XVK_STATUS_UNKNOWN");
  CHECK(XVK_SUCCESS == 0);
}

TEST_CASE("xvk_version matches the header and the project version") {
  CHECK(xvk_version() == uint32_t(XVK_VERSION));
  CHECK(XVK_VERSION == XVK_VERSION_MAJOR * 10000 + XVK_VERSION_MINOR * 100 + XVK_VERSION_PATCH);
  CHECK(XVK_VERSION_MAJOR == XVK_TEST_PROJECT_VERSION_MAJOR);
  CHECK(XVK_VERSION_MINOR == XVK_TEST_PROJECT_VERSION_MINOR);
  CHECK(XVK_VERSION_PATCH == XVK_TEST_PROJECT_VERSION_PATCH);
}

TEST_CASE("xvk_backend_name") {
  CHECK(std::string(xvk_backend_name(XVK_BACKEND_CPU)) == "cpu");
  CHECK(std::string(xvk_backend_name(XVK_BACKEND_CUDA)) == "cuda");
  CHECK(std::string(xvk_backend_name(XVK_BACKEND_HIP)) == "hip");
  CHECK(std::string(xvk_backend_name(static_cast<xvk_backend_t>(3))) == "unknown");
}

TEST_CASE("xvk_last_error_message is empty on a fresh thread and per thread") {
  stale_error();
  std::string seen = "not run";
  std::thread([&] { seen = xvk_last_error_message(); }).join();
  CHECK(seen == "");
  CHECK(last_error() == "xvk_context_synchronize: ctx is NULL");  // this thread's is untouched
}

// ===========================================================================
// Backends and contexts
// ===========================================================================

TEST_CASE("xvk_backend_query") {
  int available = -1, count = -1;
  const char *reason = nullptr;
  SUBCASE("cpu is always available") {
    REQUIRE(xvk_backend_query(XVK_BACKEND_CPU, &available, &count, &reason) == XVK_SUCCESS);
    CHECK(available == 1);
    CHECK(count == 1);
    REQUIRE(reason != nullptr);
    CHECK(std::string(reason).size() > 0);
  }
  SUBCASE("every output may be NULL") {
    CHECK(xvk_backend_query(XVK_BACKEND_CPU, nullptr, nullptr, nullptr) == XVK_SUCCESS);
    CHECK(xvk_backend_query(XVK_BACKEND_CUDA, nullptr, nullptr, nullptr) == XVK_SUCCESS);
    CHECK(xvk_backend_query(XVK_BACKEND_HIP, nullptr, &count, nullptr) == XVK_SUCCESS);
  }
  SUBCASE("an unknown backend is an error and leaves the outputs alone") {
    static const char *const sentinel = "untouched";
    reason = sentinel;
    expect_error("xvk_backend_query", XVK_ERROR_INVALID_ARGUMENT, {"backend 3 is not an xvk_backend_t value"}, {},
                 [&] { return xvk_backend_query(static_cast<xvk_backend_t>(3), &available, &count, &reason); });
    CHECK(available == -1);
    CHECK(count == -1);
    CHECK(reason == sentinel);
  }
}

TEST_CASE("GPU backends without a GPU or module report why") {
  for (xvk_backend_t backend : {XVK_BACKEND_CUDA, XVK_BACKEND_HIP}) {
    const std::string name = xvk_backend_name(backend);
    INFO("backend " << name);
    int available = -1, count = -1;
    const char *reason = nullptr;
    REQUIRE(xvk_backend_query(backend, &available, &count, &reason) == XVK_SUCCESS);
    REQUIRE(reason != nullptr);
    CHECK(std::string(reason).size() > 0);
    if (available) {
      MESSAGE("the " << name << " backend is available here (" << reason
                     << "): the unavailable-backend checks are skipped for it");
      CHECK(count >= 1);
      xvk_context *ctx = nullptr;
      CHECK(xvk_context_create(backend, 0, &ctx) == XVK_SUCCESS);
      CHECK(xvk_context_destroy(ctx) == XVK_SUCCESS);
      continue;
    }
    CHECK(available == 0);
    CHECK(count == 0);
    CHECK(std::string(reason).find(backend == XVK_BACKEND_CUDA ? "libxvk_cuda.so" : "libxvk_hip.so") !=
          std::string::npos);
    xvk_context *ctx = reinterpret_cast<xvk_context *>(uintptr_t(0x1234));
    expect_error("xvk_context_create", XVK_ERROR_BACKEND_UNAVAILABLE,
                 {"the " + name + " backend is unavailable", reason}, {},
                 [&] { return xvk_context_create(backend, 0, &ctx); });
    CHECK(ctx == reinterpret_cast<xvk_context *>(uintptr_t(0x1234)));
  }
}

TEST_CASE("xvk_context_create") {
  xvk_context *const sentinel = reinterpret_cast<xvk_context *>(uintptr_t(0x5678));
  xvk_context *ctx = sentinel;
  SUBCASE("cpu device 0") {
    REQUIRE(xvk_context_create(XVK_BACKEND_CPU, 0, &ctx) == XVK_SUCCESS);
    REQUIRE(ctx != nullptr);
    REQUIRE(ctx != sentinel);
    xvk_backend_t backend = XVK_BACKEND_HIP;
    int device = -1;
    CHECK(xvk_context_get_device(ctx, &backend, &device) == XVK_SUCCESS);
    CHECK(backend == XVK_BACKEND_CPU);
    CHECK(device == 0);
    CHECK(xvk_context_destroy(ctx) == XVK_SUCCESS);
  }
  SUBCASE("out NULL") {
    expect_error("xvk_context_create", XVK_ERROR_INVALID_ARGUMENT, {"out is NULL"}, {},
                 [] { return xvk_context_create(XVK_BACKEND_CPU, 0, nullptr); });
  }
  SUBCASE("device_id out of range") {
    for (int id : {1, -1, 1000}) {
      INFO("device_id " << id);
      expect_error("xvk_context_create", XVK_ERROR_INVALID_ARGUMENT,
                   {"device_id " + std::to_string(id) + " is out of range", "the cpu backend has 1 device(s)"}, {},
                   [&] { return xvk_context_create(XVK_BACKEND_CPU, id, &ctx); });
      CHECK(ctx == sentinel);
    }
  }
  SUBCASE("unknown backend") {
    expect_error("xvk_context_create", XVK_ERROR_INVALID_ARGUMENT, {"backend 3 is not an xvk_backend_t value"}, {},
                 [&] { return xvk_context_create(static_cast<xvk_backend_t>(3), 0, &ctx); });
    CHECK(ctx == sentinel);
  }
}

TEST_CASE("xvk_context_destroy") {
  SUBCASE("NULL is a no-op") { CHECK(xvk_context_destroy(nullptr) == XVK_SUCCESS); }
  SUBCASE("twice") {
    xvk_context *ctx = nullptr;
    REQUIRE(xvk_context_create(XVK_BACKEND_CPU, 0, &ctx) == XVK_SUCCESS);
    REQUIRE(xvk_context_destroy(ctx) == XVK_SUCCESS);
    expect_error("xvk_context_destroy", XVK_ERROR_INVALID_ARGUMENT, {"ctx is not a live context"}, {},
                 [&] { return xvk_context_destroy(ctx); });
  }
  SUBCASE("a pointer to a stack object") {
    FakeContext fake;
    expect_error("xvk_context_destroy", XVK_ERROR_INVALID_ARGUMENT, {"ctx is not a live context"}, {},
                 [&] { return xvk_context_destroy(fake.get()); });
  }
}

TEST_CASE("context functions reject NULL destroyed and foreign contexts") {
  xvk_context *destroyed = nullptr;
  REQUIRE(xvk_context_create(XVK_BACKEND_CPU, 0, &destroyed) == XVK_SUCCESS);
  REQUIRE(xvk_context_destroy(destroyed) == XVK_SUCCESS);
  FakeContext fake;
  struct Bad {
    const char *what;
    xvk_context *ctx;
    const char *message;
  };
  const Bad bads[] = {{"NULL", nullptr, "ctx is NULL"},
                      {"destroyed", destroyed, "ctx is not a live context"},
                      {"never created", fake.get(), "ctx is not a live context"}};
  for (const Bad &bad : bads) {
    INFO("ctx " << std::string(bad.what));
    expect_error("xvk_context_set_stream", XVK_ERROR_INVALID_ARGUMENT, {bad.message}, {},
                 [&] { return xvk_context_set_stream(bad.ctx, nullptr); });
    expect_error("xvk_context_synchronize", XVK_ERROR_INVALID_ARGUMENT, {bad.message}, {},
                 [&] { return xvk_context_synchronize(bad.ctx); });
    xvk_backend_t backend = XVK_BACKEND_HIP;
    int device = -7;
    expect_error("xvk_context_get_device", XVK_ERROR_INVALID_ARGUMENT, {bad.message}, {},
                 [&] { return xvk_context_get_device(bad.ctx, &backend, &device); });
    CHECK(backend == XVK_BACKEND_HIP);
    CHECK(device == -7);
    void *ptr = &device;
    expect_error("xvk_memory_alloc", XVK_ERROR_INVALID_ARGUMENT, {bad.message}, {},
                 [&] { return xvk_memory_alloc(bad.ctx, 64, &ptr); });
    CHECK(ptr == &device);
    expect_error("xvk_memory_free", XVK_ERROR_INVALID_ARGUMENT, {bad.message}, {},
                 [&] { return xvk_memory_free(bad.ctx, nullptr); });
    int src = 1, dst = 2;
    expect_error("xvk_memory_copy", XVK_ERROR_INVALID_ARGUMENT, {bad.message}, {},
                 [&] { return xvk_memory_copy(bad.ctx, &dst, &src, sizeof src); });
    CHECK(dst == 2);
  }
}

TEST_CASE("xvk_context_set_stream on the cpu backend takes NULL only") {
  Context ctx;
  CHECK(xvk_context_set_stream(ctx, nullptr) == XVK_SUCCESS);
  int not_a_stream = 0;
  expect_error("xvk_context_set_stream", XVK_ERROR_INVALID_ARGUMENT, {"stream must be NULL"}, {},
               [&] { return xvk_context_set_stream(ctx, &not_a_stream); });
  CHECK(xvk_context_synchronize(ctx) == XVK_SUCCESS);
}

TEST_CASE("xvk_context_get_device outputs may be NULL") {
  Context ctx;
  CHECK(xvk_context_get_device(ctx, nullptr, nullptr) == XVK_SUCCESS);
  int device = -1;
  CHECK(xvk_context_get_device(ctx, nullptr, &device) == XVK_SUCCESS);
  CHECK(device == 0);
  xvk_backend_t backend = XVK_BACKEND_HIP;
  CHECK(xvk_context_get_device(ctx, &backend, nullptr) == XVK_SUCCESS);
  CHECK(backend == XVK_BACKEND_CPU);
}

// ===========================================================================
// Memory
// ===========================================================================

TEST_CASE("xvk_memory_alloc") {
  Context ctx;
  SUBCASE("zero bytes gives NULL") {
    void *ptr = &ctx;
    CHECK(xvk_memory_alloc(ctx, 0, &ptr) == XVK_SUCCESS);
    CHECK(ptr == nullptr);
  }
  SUBCASE("aligned to 256 bytes and usable in full") {
    for (size_t bytes : {size_t(1), size_t(3), size_t(255), size_t(256), size_t(257), size_t(100000)}) {
      INFO(bytes << " bytes");
      void *ptr = nullptr;
      REQUIRE(xvk_memory_alloc(ctx, bytes, &ptr) == XVK_SUCCESS);
      REQUIRE(ptr != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(ptr) % 256 == 0);
      std::vector<unsigned char> pattern(bytes), back(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<unsigned char>(i * 7 + 1);
      CHECK(xvk_memory_copy(ctx, ptr, pattern.data(), bytes) == XVK_SUCCESS);
      CHECK(xvk_memory_copy(ctx, back.data(), ptr, bytes) == XVK_SUCCESS);
      CHECK(xvk_context_synchronize(ctx) == XVK_SUCCESS);
      CHECK(back == pattern);
      CHECK(xvk_memory_free(ctx, ptr) == XVK_SUCCESS);
    }
  }
  SUBCASE("out NULL") {
    expect_error("xvk_memory_alloc", XVK_ERROR_INVALID_ARGUMENT, {"out is NULL"}, {},
                 [&] { return xvk_memory_alloc(ctx, 64, nullptr); });
  }
  SUBCASE("sizes that cannot be allocated are out-of-memory errors") {
    for (size_t bytes : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 100}) {
      INFO(bytes << " bytes");
      void *ptr = &ctx;
      expect_error("xvk_memory_alloc", XVK_ERROR_OUT_OF_MEMORY, {"out of host memory"}, {},
                   [&] { return xvk_memory_alloc(ctx, bytes, &ptr); });
      CHECK(ptr == static_cast<void *>(&ctx));
    }
  }
}

TEST_CASE("xvk_memory_free and xvk_memory_copy") {
  Context ctx;
  CHECK(xvk_memory_free(ctx, nullptr) == XVK_SUCCESS);
  CHECK(xvk_memory_copy(ctx, nullptr, nullptr, 0) == XVK_SUCCESS);  // nothing to copy
  int src = 42, dst = 7;
  expect_error("xvk_memory_copy", XVK_ERROR_INVALID_ARGUMENT, {"dst is NULL"}, {},
               [&] { return xvk_memory_copy(ctx, nullptr, &src, sizeof src); });
  expect_error("xvk_memory_copy", XVK_ERROR_INVALID_ARGUMENT, {"src is NULL"}, {},
               [&] { return xvk_memory_copy(ctx, &dst, nullptr, sizeof src); });
  CHECK(dst == 7);
  CHECK(xvk_memory_copy(ctx, &dst, &src, sizeof src) == XVK_SUCCESS);
  CHECK(xvk_context_synchronize(ctx) == XVK_SUCCESS);
  CHECK(dst == 42);
}

// ===========================================================================
// Operators: contexts, tensors
// ===========================================================================

TEST_CASE("operators reject NULL destroyed and foreign contexts") {
  Context owner;
  xvk_context *destroyed = nullptr;
  REQUIRE(xvk_context_create(XVK_BACKEND_CPU, 0, &destroyed) == XVK_SUCCESS);
  REQUIRE(xvk_context_destroy(destroyed) == XVK_SUCCESS);
  FakeContext fake;
  for (const Op &op : all_ops()) {
    auto call = op.build(owner);
    for (xvk_context *bad : {static_cast<xvk_context *>(nullptr), destroyed, fake.get()}) {
      INFO(op.name << " with ctx " << std::string(bad == nullptr ? "NULL" : bad == destroyed ? "destroyed" : "fake"));
      call->ctx = bad;
      call->expect(XVK_ERROR_INVALID_ARGUMENT, {bad ? "ctx is not a live context" : "ctx is NULL"});
    }
  }
}

TEST_CASE("softmax_forward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[0]); }
TEST_CASE("log_softmax_forward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[1]); }
TEST_CASE("softmax_backward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[2]); }
TEST_CASE("log_softmax_backward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[3]); }
TEST_CASE("layer_norm_forward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[4]); }
TEST_CASE("layer_norm_backward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[5]); }
TEST_CASE("rms_norm_forward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[6]); }
TEST_CASE("rms_norm_backward: every tensor argument is validated") { check_every_tensor_argument(all_ops()[7]); }

TEST_CASE("a mismatch with the reference tensor names both tensors") {
  Context ctx;
  SUBCASE("softmax x vs y dtype") {
    auto c = softmax_forward_call(ctx, false);
    c->arg("options->mask").desc.set_present(false);
    c->arg("x").desc.t().dtype = dl_dtype(DType::bf16);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"y has dtype float16, expected bfloat16 (the dtype of x)"});
  }
  SUBCASE("softmax x vs y shape") {
    auto c = softmax_forward_call(ctx, false);
    c->arg("x").desc.shape()[1] = 2;
    c->arg("x").desc.resync();
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"y has shape [2, 3, 10], expected [2, 2, 10] (the shape of x)"});
  }
  SUBCASE("softmax backward y vs dy") {
    auto c = softmax_backward_call(ctx, false);
    c->arg("y").desc.t().dtype = dl_dtype(DType::f32);
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"dy has dtype float16, expected float32 (the dtype of y)"});
  }
  SUBCASE("norm backward dy vs x") {
    auto c = norm_backward_call(ctx, false);
    c->arg("dy").desc.shape()[0] = 1;
    c->arg("dy").desc.resync();
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {"x has shape [2, 3, 10], expected [1, 3, 10] (the shape of dy)"});
  }
}

TEST_CASE("an output whose rows overlap each other is rejected") {
  Context ctx;
  for (const Op &op : all_ops()) {
    auto c = op.build(ctx);
    const std::string name = op.name.find("backward") != std::string::npos ? "dx" : "y";
    INFO(op.name << ": " << name);
    c->arg(name).desc.set_strides({15, 5, 1});  // rows collapse to row stride 5 < 10 columns
    c->expect(XVK_ERROR_INVALID_ARGUMENT, {name + " is an output whose rows overlap (row stride 5 < 10 columns)"});
  }
}

// ===========================================================================
// Options
// ===========================================================================

TEST_CASE("options struct_size") {
  Context ctx;
  for (const Op &op : all_ops()) {
    const bool softmax = op.name.find("softmax") != std::string::npos;
    const size_t size = softmax ? sizeof(xvk_softmax_options) : sizeof(xvk_layer_norm_options);
    const std::string type = softmax                                              ? "xvk_softmax_options"
                             : op.name.find("rms") != std::string::npos ? "xvk_rms_norm_options"
                                                                                       : "xvk_layer_norm_options";
    for (uint32_t bad : {0u, 4u, uint32_t(size - 1), uint32_t(size + 1), uint32_t(size + 64), 0xffffffffu}) {
      auto c = op.build(ctx);
      c->softmax.struct_size = c->layer_norm.struct_size = c->rms_norm.struct_size = bad;
      INFO(op.name << ": struct_size " << bad);
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {"options->struct_size is " + std::to_string(bad) + "; expected " + std::to_string(size) + " to " +
                     std::to_string(size),
                 "sizeof(" + type + ")"});
    }
  }
}

TEST_CASE("softmax options") {
  Context ctx;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (bool log : {false, true}) {
    for (bool backward : {false, true}) {
      INFO((log ? "log_" : "") << "softmax_" << (backward ? "backward" : "forward"));
      for (float scale : {nan, inf, -inf}) {
        auto c = backward ? softmax_backward_call(ctx, log) : softmax_forward_call(ctx, log);
        c->softmax.scale = scale;
        INFO("scale " << scale);
        c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->scale is", "expected a finite number"});
      }
      for (int32_t causal : {-1, 3, 1000}) {
        auto c = backward ? softmax_backward_call(ctx, log) : softmax_forward_call(ctx, log);
        c->softmax.causal = causal;
        INFO("causal " << causal);
        c->expect(XVK_ERROR_INVALID_ARGUMENT,
                  {"options->causal is " + std::to_string(causal) + "; expected an xvk_causal_t value"});
      }
    }
  }
}

TEST_CASE("softmax causal and mask rules") {
  Context ctx;
  Rng rng(5);
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    {
      INFO("causal needs x with two dimensions");
      Tensor x(ctx, {10}, kAct), y(ctx, {10}, kAct);
      x.fill(rng.normal(10, 0, 1, kAct));
      xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
      for (int32_t causal : {XVK_CAUSAL_TOP_LEFT, XVK_CAUSAL_BOTTOM_RIGHT}) {
        o.causal = causal;
        expect_error(log ? "xvk_log_softmax_forward" : "xvk_softmax_forward", XVK_ERROR_INVALID_ARGUMENT,
                     {"options->causal needs x with at least 2 dimensions"}, {&x, &y}, [&] {
                       return log ? xvk_log_softmax_forward(ctx, x.dl(), &o, y.dl())
                                  : xvk_softmax_forward(ctx, x.dl(), &o, y.dl());
                     });
      }
      o.causal = XVK_CAUSAL_NONE;  // the same tensors are fine without it
      CHECK((log ? xvk_log_softmax_forward(ctx, x.dl(), &o, y.dl()) : xvk_softmax_forward(ctx, x.dl(), &o, y.dl())) ==
            XVK_SUCCESS);
    }
    {
      INFO("mask with more dimensions than x");
      auto c = softmax_forward_call(ctx, log);
      c->arg("options->mask").desc.set_shape({1, 1, 3, 10});
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->mask has 4 dimension(s); expected 1 to 3"});
    }
    {
      INFO("mask with no dimensions");
      auto c = softmax_forward_call(ctx, log);
      c->arg("options->mask").desc.set_shape({});
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->mask has 0 dimension(s)"});
    }
    {
      INFO("mask that does not broadcast");
      auto c = softmax_forward_call(ctx, log);
      c->arg("options->mask").desc.set_shape({2, 10});  // 2 against x's 3
      c->expect(XVK_ERROR_INVALID_ARGUMENT,
                {"options->mask has size 2 in dimension 0, which does not broadcast to x's 3"});
    }
    {
      INFO("mask of another float dtype");
      auto c = softmax_forward_call(ctx, log);
      c->arg("options->mask").desc.t().dtype = dl_dtype(DType::f32);
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->mask has dtype float32, expected float16 (the dtype of x)"});
    }
    {
      INFO("the backward takes no mask and no causal");
      auto c = softmax_backward_call(ctx, log);
      Tensor mask(ctx, {10}, kAct);
      mask.fill(rng.normal(10, 0, 1, kAct));
      c->softmax.mask = mask.dl();
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->mask must be NULL for the backward"});
      c->softmax.mask = nullptr;
      for (int32_t causal : {XVK_CAUSAL_TOP_LEFT, XVK_CAUSAL_BOTTOM_RIGHT}) {
        c->softmax.causal = causal;
        c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->causal must be XVK_CAUSAL_NONE for the backward"});
      }
    }
  }
}

TEST_CASE("norm options") {
  Context ctx;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (bool rms : {false, true}) {
    INFO((rms ? "rms_norm" : "layer_norm"));
    {
      INFO("epsilon must be finite and positive");
      for (float eps : {0.0f, -0.0f, -1e-5f, nan, inf, -inf}) {
        auto c = norm_forward_call(ctx, rms);
        c->layer_norm.epsilon = c->rms_norm.epsilon = eps;
        INFO("epsilon " << eps);
        c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->epsilon is", "expected a finite number > 0"});
      }
    }
    {
      INFO("normalized_ndim below 0");
      for (bool backward : {false, true}) {
        auto c = backward ? norm_backward_call(ctx, rms) : norm_forward_call(ctx, rms);
        c->layer_norm.normalized_ndim = c->rms_norm.normalized_ndim = -1;
        c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->normalized_ndim is -1; expected >= 0"});
      }
    }
    {
      INFO("normalized_ndim above x's ndim");
      for (bool backward : {false, true}) {
        auto c = backward ? norm_backward_call(ctx, rms) : norm_forward_call(ctx, rms);
        c->layer_norm.normalized_ndim = c->rms_norm.normalized_ndim = 4;
        c->expect(XVK_ERROR_INVALID_ARGUMENT,
                  {"options->normalized_ndim is 4", std::string(backward ? "dy" : "x") + " has 3 dimension(s)"});
      }
    }
    {
      INFO("residual_out needs residual");
      auto c = norm_forward_call(ctx, rms);
      c->arg("options->residual").desc.set_present(false);
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"options->residual_out is set but options->residual is NULL"});
    }
    {
      INFO("the backward takes no residual");
      Rng rng(6);
      Tensor r(ctx, kShape, kAct);
      r.fill(rng.normal(60, 0, 1, kAct));
      for (int which = 0; which < 3; ++which) {
        auto c = norm_backward_call(ctx, rms);
        c->layer_norm.residual = c->rms_norm.residual = which != 1 ? r.dl() : nullptr;
        c->layer_norm.residual_out = c->rms_norm.residual_out = which != 0 ? r.dl() : nullptr;
        INFO("case " << which);
        expect_error(c->function, XVK_ERROR_INVALID_ARGUMENT,
                     {"options->residual and options->residual_out must be NULL for the backward"},
                     [&] {
                       auto w = c->watched();
                       w.push_back(&r);
                       return w;
                     }(),
                     [&] { return c->run(); });
      }
    }
  }
}

TEST_CASE("norm parameters") {
  Context ctx;
  Rng rng(7);
  for (bool rms : {false, true}) {
    INFO((rms ? "rms_norm" : "layer_norm"));
    {
      INFO("gamma with the wrong element count (the message of DESIGN.md)");
      Tensor x(ctx, {4, 768}, DType::f32), y(ctx, {4, 768}, DType::f32), gamma(ctx, {767}, DType::f32);
      x.fill(rng.normal(4 * 768, 0, 1));
      gamma.fill(rng.normal(767, 1, 0.1));
      const std::string fn = rms ? "xvk_rms_norm_forward" : "xvk_layer_norm_forward";
      expect_error(fn, XVK_ERROR_INVALID_ARGUMENT,
                   {fn + ": gamma has 767 elements, expected 768 (the normalized size)"}, {&x, &y, &gamma}, [&] {
                     return rms ? xvk_rms_norm_forward(ctx, x.dl(), gamma.dl(), nullptr, y.dl(), nullptr)
                                : xvk_layer_norm_forward(ctx, x.dl(), gamma.dl(), nullptr, nullptr, y.dl(), nullptr,
                                                         nullptr);
                   });
      if (!rms) {
        Tensor beta(ctx, {769}, DType::f32);
        beta.fill(rng.normal(769, 0, 1));
        expect_error(fn, XVK_ERROR_INVALID_ARGUMENT, {"beta has 769 elements, expected 768 (the normalized size)"},
                     {&x, &y, &beta},
                     [&] { return xvk_layer_norm_forward(ctx, x.dl(), nullptr, beta.dl(), nullptr, y.dl(), nullptr, nullptr); });
      }
    }
    {
      INFO("gamma with the right count in the wrong shape");
      auto c = norm_forward_call(ctx, rms);
      c->arg("gamma").desc.set_shape({2, 5});
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"gamma has shape [2, 5]; expected 1-D or the normalized shape of x"});
    }
    {
      INFO("gamma and beta of different dtypes");
      if (!rms) {
        auto c = norm_forward_call(ctx, false);
        Tensor beta16(ctx, {10}, kAct);
        beta16.fill(rng.normal(10, 0, 1, kAct));
        c->arg("beta").desc = beta16.desc();
        c->expect(XVK_ERROR_INVALID_ARGUMENT, {"beta has dtype float16 but gamma has float32; they must share a dtype"});
        auto b = norm_backward_call(ctx, false);
        Tensor dbeta16(ctx, {10}, kAct);
        b->arg("dbeta").desc = dbeta16.desc();
        expect_error(b->function, XVK_ERROR_INVALID_ARGUMENT,
                     {"dbeta has dtype float16 but dgamma has float32; they must share a dtype"},
                     [&] {
                       auto w = b->watched();
                       w.push_back(&dbeta16);
                       return w;
                     }(),
                     [&] { return b->run(); });
      }
    }
    {
      INFO("backward statistics are required");
      auto c = norm_backward_call(ctx, rms);
      c->arg("rstd").desc.set_present(false);
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"rstd is NULL"});
      if (!rms) {
        auto d = norm_backward_call(ctx, rms);
        d->arg("mean").desc.set_present(false);
        d->expect(XVK_ERROR_INVALID_ARGUMENT, {"mean is NULL"});
      }
    }
    {
      INFO("statistics must be float32 even with float32 parameters");
      for (bool backward : {false, true}) {
        auto c = backward ? norm_backward_call(ctx, rms) : norm_forward_call(ctx, rms);
        c->arg("rstd").desc.t().dtype = dl_dtype(DType::f16);
        c->expect(XVK_ERROR_INVALID_ARGUMENT, {"rstd has dtype float16; expected float32"});
      }
    }
    {
      INFO("statistics with one element too many");
      Tensor rstd7(ctx, {7}, DType::f32);
      rstd7.fill(rng.uniform(7, 0.5, 2));
      auto c = norm_forward_call(ctx, rms);
      c->arg("rstd").desc = rstd7.desc();
      c->expect(XVK_ERROR_INVALID_ARGUMENT, {"rstd has 7 elements, expected 6 (one per row)"});
    }
  }
}

// ===========================================================================
// Overlaps and in-place use
// ===========================================================================

namespace {

// Moves argument `target` into the middle of a fresh buffer (keeping its
// values) and argument `moved` onto that buffer, `shift` of target's
// elements further; `moved` keeps its own shape and dtype. The buffer is
// large enough for both wherever they land, so a call that wrongly accepted
// the overlap would still stay inside memory (and be caught by the checks).
Tensor &place_on(OpCall &c, const std::string &moved, const std::string &target, int64_t shift,
                 std::vector<std::unique_ptr<Tensor>> &keep) {
  Tensor &t = c.tensor(target), &m = c.tensor(moved);
  const size_t elem = dtype_size(t.dtype());
  const size_t tb = size_t(t.numel()) * elem, mb = size_t(m.numel()) * dtype_size(m.dtype());
  const size_t room = (std::max(tb, mb) + 255) / 256 * 256;
  REQUIRE(size_t(std::llabs(shift)) * elem < room);
  keep.push_back(std::make_unique<Tensor>(c.ctx, std::vector<int64_t>{int64_t(3 * room / elem)}, t.dtype()));
  Tensor &big = *keep.back();
  Bytes bytes = big.snapshot();
  const Bytes values = t.snapshot();  // the builders' tensors are contiguous, unpadded
  std::copy(values.begin(), values.begin() + long(tb), bytes.begin() + long(room));
  big.restore(bytes);
  DLTensor &td = c.arg(target).desc.t();
  td.data = big.dl()->data;
  td.byte_offset = big.dl()->byte_offset + room;
  DLTensor &md = c.arg(moved).desc.t();
  md.data = big.dl()->data;
  md.byte_offset = uint64_t(int64_t(td.byte_offset) + shift * int64_t(elem));
  return big;
}

struct OverlapCase {
  const char *moved, *target;
  int64_t shift;
  const char *message;  // NULL: no overlap, the call must succeed
};

void check_overlaps(const Op &op, const std::vector<OverlapCase> &cases) {
  Context ctx;
  for (const OverlapCase &k : cases) {
    INFO(op.name << ": " << std::string(k.moved) << " on " << std::string(k.target) << " shifted by " << k.shift);
    auto c = op.build(ctx);
    std::vector<std::unique_ptr<Tensor>> keep;
    place_on(*c, k.moved, k.target, k.shift, keep);
    if (!k.message) {
      CHECK_MESSAGE(c->run() == XVK_SUCCESS, last_error());
      continue;
    }
    auto watched = c->watched();
    for (auto &t : keep) watched.push_back(t.get());
    expect_error(c->function, XVK_ERROR_INVALID_ARGUMENT, {k.message}, watched, [&] { return c->run(); });
  }
}

// In-place use the header allows: `output` is `input` itself. The result
// must equal the out-of-place one.
void check_in_place(const Op &op, const std::string &output, const std::vector<std::string> &inputs) {
  Context ctx;
  auto ref = op.build(ctx);
  REQUIRE(ref->run() == XVK_SUCCESS);
  for (const std::string &input : inputs) {
    INFO(op.name << ": " << output << " == " << input);
    auto c = op.build(ctx);  // the same seed: the same inputs
    c->arg(output).desc = c->tensor(input).desc();
    REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
    CHECK(c->tensor(input).read() == ref->tensor(output).read());
    for (auto &a : c->args)
      if (a->output && a->desc.present() && a->name != output)
        CHECK_MESSAGE(a->tensor->read() == ref->tensor(a->name).read(), a->name << " differs");
  }
}

}  // namespace

TEST_CASE("softmax forward: y may be x and nothing else") {
  for (const Op &op : {all_ops()[0], all_ops()[1]}) {
    check_in_place(op, "y", {"x"});
    check_overlaps(op, {
                           {"y", "x", 1, "y shares memory with x"},
                           {"y", "x", -1, "y shares memory with x"},
                           {"y", "x", 59, "y shares memory with x"},
                           {"y", "x", -59, "y shares memory with x"},
                           {"y", "options->mask", 0, "y shares memory with options->mask"},
                           {"y", "options->mask", 7, "y shares memory with options->mask"},
                           {"y", "x", 60, nullptr},   // right after x: no overlap
                           {"y", "x", -60, nullptr},  // right before x
                       });
  }
}

TEST_CASE("softmax forward: y on x with another row stride is rejected") {
  Context ctx;
  Rng rng(8);
  Tensor buf(ctx, {6, 12}, kAct);
  buf.fill(rng.normal(72, 0, 1, kAct));
  TensorDesc x = buf.desc(), y = buf.desc();
  x.set_shape({6, 10});
  x.set_strides({12, 1});
  y.set_shape({6, 10});
  y.set_strides({11, 1});
  expect_error("xvk_softmax_forward", XVK_ERROR_INVALID_ARGUMENT, {"y shares memory with x"}, {&buf},
               [&] { return xvk_softmax_forward(ctx, x.get(), nullptr, y.get()); });
}

TEST_CASE("softmax backward: dx may be dy or y and nothing else") {
  for (const Op &op : {all_ops()[2], all_ops()[3]}) {
    check_in_place(op, "dx", {"dy", "y"});
    check_overlaps(op, {
                           {"dx", "dy", 31, "dx shares memory with dy"},
                           {"dx", "dy", -1, "dx shares memory with dy"},
                           {"dx", "y", 1, "dx shares memory with y"},
                           {"dx", "y", -7, "dx shares memory with y"},
                           {"dx", "y", 60, nullptr},
                       });
  }
}

TEST_CASE("norm forward: y may be x or residual and nothing else") {
  for (const Op &op : {all_ops()[4], all_ops()[6]}) {
    const bool rms = op.name.find("rms") != std::string::npos;
    check_in_place(op, "y", {"x", "options->residual"});
    std::vector<OverlapCase> cases = {
        {"y", "x", 1, "y shares memory with x"},
        {"y", "x", -1, "y shares memory with x"},
        {"y", "options->residual", 5, "y shares memory with options->residual"},
        {"options->residual_out", "x", 0, "options->residual_out shares memory with x"},
        {"options->residual_out", "options->residual", 0, "options->residual_out shares memory with options->residual"},
        {"options->residual_out", "y", 0, "y and options->residual_out are outputs that share memory"},
        {"options->residual_out", "y", -3, "y and options->residual_out are outputs that share memory"},
        {"rstd", "x", 2, "rstd shares memory with x"},
        {"rstd", "gamma", 0, "rstd shares memory with gamma"},
        {"rstd", "y", 4, "y and rstd are outputs that share memory"},
        {"y", "x", 60, nullptr},
        {"rstd", "gamma", 10, nullptr},
    };
    if (!rms) {
      cases.push_back({"mean", "rstd", 1, "mean and rstd are outputs that share memory"});
      cases.push_back({"mean", "rstd", 0, "mean and rstd are outputs that share memory"});
      cases.push_back({"mean", "rstd", -5, "mean and rstd are outputs that share memory"});
      cases.push_back({"y", "beta", 0, "y shares memory with beta"});
      cases.push_back({"mean", "options->residual_out", 4, "options->residual_out and mean are outputs that share memory"});
      cases.push_back({"mean", "rstd", 6, nullptr});
    }
    check_overlaps(op, cases);
  }
}

TEST_CASE("norm backward: dx may be dy or x and nothing else") {
  for (const Op &op : {all_ops()[5], all_ops()[7]}) {
    const bool rms = op.name.find("rms") != std::string::npos;
    check_in_place(op, "dx", {"dy", "x"});
    std::vector<OverlapCase> cases = {
        {"dx", "dy", 3, "dx shares memory with dy"},
        {"dx", "x", 1, "dx shares memory with x"},
        {"dx", "x", -2, "dx shares memory with x"},
        {"dgamma", "gamma", 0, "dgamma shares memory with gamma"},
        {"dgamma", "rstd", 0, "dgamma shares memory with rstd"},
        {"dgamma", "x", 8, "dgamma shares memory with x"},
        {"dgamma", "dx", 0, "dx and dgamma are outputs that share memory"},
        {"dgamma", "gamma", 10, nullptr},
    };
    if (!rms) {
      cases.push_back({"dbeta", "dgamma", 5, "dgamma and dbeta are outputs that share memory"});
      cases.push_back({"mean", "dx", 0, "dx shares memory with mean"});
      cases.push_back({"dbeta", "dgamma", -10, nullptr});
    }
    check_overlaps(op, cases);
  }
}

// ===========================================================================
// Valid edge cases
// ===========================================================================

TEST_CASE("rows == 0 is valid and writes nothing") {
  Context ctx;
  for (const Op &op : all_ops()) {
    INFO(op.name);
    auto c = op.build(ctx);
    for (auto &a : c->args) {
      if (a->kind == Kind::rows && a->name != "options->mask") {
        a->desc.shape()[0] = 0;
        a->desc.resync();
      }
      if (a->kind == Kind::stats) a->desc.set_shape({0});
    }
    std::vector<Bytes> before;
    for (const Tensor *t : c->watched()) before.push_back(t->snapshot());
    REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
    auto watched = c->watched();
    for (size_t i = 0; i < watched.size(); ++i) {
      const std::string name = c->args[i]->name;
      if (name == "dgamma" || name == "dbeta") {
        // A sum over no rows: zeros, written.
        const std::vector<float> v = c->tensor(name).read();
        CHECK_MESSAGE(v == std::vector<float>(10, 0.0f), name << " is not all zeros");
      } else {
        CHECK_MESSAGE(watched[i]->snapshot() == before[i], name << " was written");
      }
    }
  }
}

TEST_CASE("rows == 0 with NULL data is valid") {
  Context ctx;
  int64_t shape[2] = {0, 16};
  for (uint64_t offset : {uint64_t(0), uint64_t(64)}) {
    INFO("byte_offset " << offset);
    DLTensor x{nullptr, {kDLCPU, 0}, 2, dl_dtype(DType::f32), shape, nullptr, offset};
    DLTensor y = x;
    CHECK(xvk_softmax_forward(ctx, &x, nullptr, &y) == XVK_SUCCESS);
    CHECK(xvk_rms_norm_forward(ctx, &x, nullptr, nullptr, &y, nullptr) == XVK_SUCCESS);
  }
}

TEST_CASE("softmax over zero columns is valid") {
  Context ctx;
  Tensor x(ctx, {3, 0}, DType::f32), y(ctx, {3, 0}, DType::f32);
  const Bytes before = y.snapshot();
  CHECK(xvk_softmax_forward(ctx, x.dl(), nullptr, y.dl()) == XVK_SUCCESS);
  CHECK(xvk_log_softmax_backward(ctx, x.dl(), x.dl(), nullptr, y.dl()) == XVK_SUCCESS);
  CHECK(y.snapshot() == before);
}

TEST_CASE("norms over zero columns are rejected") {
  Context ctx;
  Tensor x(ctx, {3, 0}, DType::f32), y(ctx, {3, 0}, DType::f32);
  expect_error("xvk_layer_norm_forward", XVK_ERROR_INVALID_ARGUMENT,
               {"x's normalized size (the product of its last 1 dimension(s)) is 0"}, {&x, &y},
               [&] { return xvk_layer_norm_forward(ctx, x.dl(), nullptr, nullptr, nullptr, y.dl(), nullptr, nullptr); });
}

TEST_CASE("optional arguments may each be absent") {
  Context ctx;
  for (const Op &op : all_ops()) {
    auto ref = op.build(ctx);
    REQUIRE(ref->run() == XVK_SUCCESS);
    for (auto &a : ref->args) {
      if (a->required) continue;
      if (a->name == "options->residual") continue;  // residual_out needs it: covered with both absent below
      INFO(op.name << " without " << a->name);
      auto c = op.build(ctx);
      c->arg(a->name).desc.set_present(false);
      const Bytes before = c->tensor(a->name).snapshot();
      REQUIRE_MESSAGE(c->run() == XVK_SUCCESS, last_error());
      CHECK_MESSAGE(c->tensor(a->name).snapshot() == before, "the absent " << a->name << "'s memory was written");
      for (auto &o : c->args)
        if (o->output && o->desc.present()) CHECK_MESSAGE(!has_nan(o->tensor->read()), o->name << " not written");
      // Outputs that do not depend on the absent argument are unchanged.
      if (a->output)
        for (auto &o : c->args)
          if (o->output && o->desc.present()) CHECK(o->tensor->read() == ref->tensor(o->name).read());
    }
  }
}

TEST_CASE("NULL options mean the defaults") {
  Context ctx;
  for (const Op &op : all_ops()) {
    INFO(op.name);
    auto a = op.build(ctx), b = op.build(ctx);
    for (auto *c : {a.get(), b.get()})
      for (const char *name : {"options->mask", "options->residual", "options->residual_out"})
        if (c->has(name)) c->arg(name).desc.set_present(false);
    a->null_options = true;  // b: the _INIT defaults, struct_size == sizeof
    REQUIRE(a->run() == XVK_SUCCESS);
    REQUIRE(b->run() == XVK_SUCCESS);
    for (auto &arg : a->args)
      if (arg->output && arg->desc.present()) {
        CHECK(!has_nan(arg->tensor->read()));
        CHECK(arg->tensor->snapshot() == b->tensor(arg->name).snapshot());
      }
  }
}

TEST_CASE("strided rows: a column slice of a wider matrix") {
  Context ctx;
  Rng rng(9);
  const int64_t rows = 5, cols = 7, ld = 12;
  for (DType dt : kAllDtypes) {
    INFO(std::string(dtype_name(dt)));
    const std::vector<float> xv = rng.normal(size_t(rows * cols), 0, 1, dt);
    const std::vector<float> gv = rng.normal(size_t(cols), 1, 0.2, dt);
    Tensor xs(ctx, {rows, cols}, dt, {ld, 1}, 8), ys(ctx, {rows, cols}, dt, {ld, 1}, 12);
    Tensor xc(ctx, {rows, cols}, dt), yc(ctx, {rows, cols}, dt), g(ctx, {cols}, dt);
    xs.fill(xv);
    xc.fill(xv);
    g.fill(gv);
    CHECK(xs.bytes() > size_t(rows * cols) * dtype_size(dt));
    for (int op = 0; op < 4; ++op) {
      INFO("op " << op);
      ys.poison();
      yc.poison();
      const Bytes before = ys.snapshot(), x_before = xs.snapshot();
      auto run = [&](Tensor &x, Tensor &y) {
        switch (op) {
          case 0: return xvk_softmax_forward(ctx, x.dl(), nullptr, y.dl());
          case 1: return xvk_log_softmax_backward(ctx, x.dl(), x.dl(), nullptr, y.dl());
          case 2: return xvk_layer_norm_forward(ctx, x.dl(), g.dl(), nullptr, nullptr, y.dl(), nullptr, nullptr);
          default: return xvk_rms_norm_forward(ctx, x.dl(), g.dl(), nullptr, y.dl(), nullptr);
        }
      };
      REQUIRE(run(xs, ys) == XVK_SUCCESS);
      REQUIRE(run(xc, yc) == XVK_SUCCESS);
      const std::vector<float> got = ys.read();
      CHECK(!has_nan(got));
      CHECK(got == yc.read());
      CHECK_MESSAGE(ys.gaps_unchanged(before), "bytes between the rows of y were written");
      CHECK(xs.snapshot() == x_before);
    }
  }
}

TEST_CASE("two column halves of one buffer do not overlap") {
  Context ctx;
  Rng rng(10);
  Tensor buf(ctx, {4, 20}, DType::f32);
  buf.fill(rng.normal(80, 0, 1));
  TensorDesc left = buf.desc(), right = buf.desc();
  left.set_shape({4, 10});
  left.set_strides({20, 1});
  right = left;
  right.t().byte_offset += 10 * 4;
  const std::vector<float> before = buf.read();
  REQUIRE_MESSAGE(xvk_softmax_forward(ctx, left.get(), nullptr, right.get()) == XVK_SUCCESS, last_error());
  const std::vector<float> after = buf.read();
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int j = 0; j < 10; ++j) {
      CHECK(after[size_t(r * 20 + j)] == before[size_t(r * 20 + j)]);  // the input half is untouched
      sum += after[size_t(r * 20 + 10 + j)];
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("size-1 dimensions with odd strides") {
  Context ctx;
  Rng rng(11);
  const std::vector<float> xv = rng.normal(20, 0, 1);
  Tensor ref_x(ctx, {2, 10}, DType::f32), ref_y(ctx, {2, 10}, DType::f32);
  ref_x.fill(xv);
  REQUIRE(xvk_softmax_forward(ctx, ref_x.dl(), nullptr, ref_y.dl()) == XVK_SUCCESS);
  const std::vector<float> expected = ref_y.read();
  struct Layout {
    std::vector<int64_t> shape, strides;
  };
  const Layout layouts[] = {
      {{2, 1, 10}, {10, 999, 1}},
      {{1, 2, 10}, {-77, 10, 1}},   // negative stride on a size-1 dimension is ignored
      {{2, 10, 1}, {10, 1, 12345}}, // a trailing size-1 dimension
      {{1, 2, 1, 10}, {0, 10, 3, 1}},
  };
  for (const Layout &l : layouts) {
    INFO("shape " << shape_string(l.shape) << " strides " << shape_string(l.strides));
    TensorDesc x = ref_x.desc(), y = ref_y.desc();
    x.set_shape(l.shape);
    x.set_strides(l.strides);
    Tensor out(ctx, {2, 10}, DType::f32);
    y = out.desc();
    y.set_shape(l.shape);
    y.set_strides(l.strides);
    if (l.shape.back() == 1) {  // softmax over a size-1 dimension: every element is 1
      REQUIRE_MESSAGE(xvk_softmax_forward(ctx, x.get(), nullptr, y.get()) == XVK_SUCCESS, last_error());
      CHECK(out.read() == std::vector<float>(20, 1.0f));
      xvk_layer_norm_options o = XVK_LAYER_NORM_OPTIONS_INIT;
      o.normalized_ndim = 2;  // over [10, 1]
      out.poison();
      REQUIRE_MESSAGE(xvk_layer_norm_forward(ctx, x.get(), nullptr, nullptr, &o, y.get(), nullptr, nullptr) ==
                          XVK_SUCCESS,
                      last_error());
      CHECK(!has_nan(out.read()));
      continue;
    }
    REQUIRE_MESSAGE(xvk_softmax_forward(ctx, x.get(), nullptr, y.get()) == XVK_SUCCESS, last_error());
    CHECK(out.read() == expected);
  }
}

// ===========================================================================
// Threads
// ===========================================================================

TEST_CASE("contexts used concurrently from several threads keep their own errors") {
  constexpr int kThreads = 4, kIterations = 150;
  std::vector<std::vector<std::string>> problems(kThreads);
  std::atomic<int> started{0};
  auto worker = [&](int tid) {
    auto note = [&](const std::string &p) {
      if (problems[size_t(tid)].size() < 5) problems[size_t(tid)].push_back(p);
    };
    try {
      Context ctx;
      const int64_t cols = 16 + tid;
      Rng rng(uint64_t(100 + tid));
      Tensor x(ctx, {3, cols}, DType::f32), y(ctx, {3, cols}, DType::f32), gamma(ctx, {cols - 1}, DType::f32);
      const std::vector<float> xv = rng.normal(size_t(3 * cols), 0, 1);
      x.fill(xv);
      gamma.fill(rng.normal(size_t(cols - 1), 1, 0.1));
      // Expected softmax of row 0, computed here.
      double m = -1e300, sum = 0;
      for (int64_t j = 0; j < cols; ++j) m = std::max(m, double(xv[size_t(j)]));
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(xv[size_t(j)]) - m);
      const std::string expected_message = "xvk_layer_norm_forward: gamma has " + std::to_string(cols - 1) +
                                           " elements, expected " + std::to_string(cols) + " (the normalized size)";
      ++started;
      while (started.load() < kThreads) std::this_thread::yield();
      for (int it = 0; it < kIterations; ++it) {
        y.poison();
        if (xvk_softmax_forward(ctx, x.dl(), nullptr, y.dl()) != XVK_SUCCESS) note("softmax failed");
        const float y0 = y.read()[0];
        if (std::fabs(y0 - std::exp(double(xv[0]) - m) / sum) > 1e-6) note("wrong softmax value");
        if (xvk_layer_norm_forward(ctx, x.dl(), gamma.dl(), nullptr, nullptr, y.dl(), nullptr, nullptr) !=
            XVK_ERROR_INVALID_ARGUMENT)
          note("bad gamma accepted");
        std::this_thread::yield();
        if (expected_message != xvk_last_error_message())
          note(std::string("message \"") + xvk_last_error_message() + "\", expected \"" + expected_message + "\"");
        // A successful call does not clear it.
        if (xvk_rms_norm_forward(ctx, x.dl(), nullptr, nullptr, y.dl(), nullptr) != XVK_SUCCESS) note("rms failed");
        if (expected_message != xvk_last_error_message()) note("a successful call changed the message");
      }
    } catch (const std::exception &e) {
      note(e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto &t : threads) t.join();
  CHECK(started.load() == kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (const std::string &p : problems[size_t(t)]) FAIL_CHECK("thread " << t << ": " << p);
}

TEST_CASE("contexts can be created and destroyed from several threads at once") {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        xvk_context *ctx = nullptr;
        if (xvk_context_create(XVK_BACKEND_CPU, 0, &ctx) != XVK_SUCCESS) ++failures;
        if (xvk_context_synchronize(ctx) != XVK_SUCCESS) ++failures;
        if (xvk_context_destroy(ctx) != XVK_SUCCESS) ++failures;
        if (xvk_context_destroy(ctx) != XVK_ERROR_INVALID_ARGUMENT) ++failures;  // gone
      }
    });
  for (auto &t : threads) t.join();
  CHECK(failures.load() == 0);
}

TEST_CASE("normalized_ndim: 0 means 1 and gamma may be 1-D or shaped") {
  Context ctx;
  Rng rng(12);
  Tensor x(ctx, {2, 3, 10}, DType::f32), y0(ctx, {2, 3, 10}, DType::f32), y1(ctx, {2, 3, 10}, DType::f32);
  x.fill(rng.normal(60, 0, 1));
  xvk_layer_norm_options o = XVK_LAYER_NORM_OPTIONS_INIT;
  CHECK(o.struct_size == sizeof(xvk_layer_norm_options));
  o.normalized_ndim = 0;
  REQUIRE(xvk_layer_norm_forward(ctx, x.dl(), nullptr, nullptr, &o, y0.dl(), nullptr, nullptr) == XVK_SUCCESS);
  o.normalized_ndim = 1;
  REQUIRE(xvk_layer_norm_forward(ctx, x.dl(), nullptr, nullptr, &o, y1.dl(), nullptr, nullptr) == XVK_SUCCESS);
  CHECK(!has_nan(y0.read()));
  CHECK(y0.read() == y1.read());
  // Over the last two dimensions: gamma of 30 elements, 1-D or [3, 10]; rstd one per row (2).
  o.normalized_ndim = 2;
  Tensor g1(ctx, {30}, DType::f32), g2(ctx, {3, 10}, DType::f32), rstd(ctx, {2}, DType::f32);
  const std::vector<float> gv = rng.normal(30, 1, 0.3);
  g1.fill(gv);
  g2.fill(gv);
  REQUIRE(xvk_layer_norm_forward(ctx, x.dl(), g1.dl(), nullptr, &o, y0.dl(), nullptr, rstd.dl()) == XVK_SUCCESS);
  REQUIRE(xvk_layer_norm_forward(ctx, x.dl(), g2.dl(), nullptr, &o, y1.dl(), nullptr, nullptr) == XVK_SUCCESS);
  CHECK(!has_nan(y0.read()));
  CHECK(!has_nan(rstd.read()));
  CHECK(y0.read() == y1.read());
  // [10, 3] has the right count but not the normalized shape.
  Tensor g3(ctx, {10, 3}, DType::f32);
  g3.fill(gv);
  expect_error("xvk_layer_norm_forward", XVK_ERROR_INVALID_ARGUMENT,
               {"gamma has shape [10, 3]; expected 1-D or the normalized shape of x"}, {&x, &y0, &g3}, [&] {
                 return xvk_layer_norm_forward(ctx, x.dl(), g3.dl(), nullptr, &o, y0.dl(), nullptr, nullptr);
               });
  // rstd with one element per row of the [2, 3, 10] view as rows x 30 (6 would be wrong).
  Tensor rstd6(ctx, {6}, DType::f32);
  expect_error("xvk_layer_norm_forward", XVK_ERROR_INVALID_ARGUMENT, {"rstd has 6 elements, expected 2 (one per row)"},
               {&x, &y0, &rstd6},
               [&] { return xvk_layer_norm_forward(ctx, x.dl(), nullptr, nullptr, &o, y0.dl(), nullptr, rstd6.dl()); });
}
