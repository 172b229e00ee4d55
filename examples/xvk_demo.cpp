// xvk-demo: the first program a newcomer runs. Lists the backends and why
// each is or is not usable, runs every operator on the best usable backend,
// checks each result against the CPU backend on the same inputs, and prints
// a table (operator, dtype, shape, max error, time).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "xvk/xvk.h"

namespace {

#define CHECK(call)                                                                          \
  do {                                                                                       \
    xvk_status_t s_ = (call);                                                                \
    if (s_ != XVK_SUCCESS) {                                                                 \
      std::fprintf(stderr, "%s failed: %s\n  %s\n", #call, xvk_status_string(s_), xvk_last_error_message()); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

const char *dtype_label(DLDataType t) { return t.code == kDLBfloat ? "bf16" : t.bits == 16 ? "fp16" : "fp32"; }

// A tensor living on one context's device, filled from and read back as floats.
struct Tensor {
  xvk_context *ctx = nullptr;
  std::vector<int64_t> shape;
  DLTensor dl{};
  size_t count = 0;

  Tensor(xvk_context *c, std::vector<int64_t> s, DLDataType dtype) : ctx(c), shape(std::move(s)) {
    xvk_backend_t backend;
    int device;
    CHECK(xvk_context_get_device(ctx, &backend, &device));
    count = 1;
    for (int64_t d : shape) count *= size_t(d);
    dl.device = {backend == XVK_BACKEND_CUDA ? kDLCUDA : backend == XVK_BACKEND_HIP ? kDLROCM : kDLCPU, device};
    dl.ndim = int(shape.size());
    dl.dtype = dtype;
    dl.shape = shape.data();
    CHECK(xvk_memory_alloc(ctx, count * dtype.bits / 8, &dl.data));
  }
  Tensor(const Tensor &) = delete;
  ~Tensor() { xvk_memory_free(ctx, dl.data); }

  void upload(const std::vector<float> &v) {
    std::vector<uint16_t> half(count);
    const void *src = v.data();
    if (dl.dtype.bits == 16) {
      for (size_t i = 0; i < count; ++i)
        half[i] = dl.dtype.code == kDLBfloat ? xvk::to_bfloat16(v[i]).bits : xvk::to_half(v[i]).bits;
      src = half.data();
    }
    CHECK(xvk_memory_copy(ctx, dl.data, src, count * dl.dtype.bits / 8));
    CHECK(xvk_context_synchronize(ctx));
  }
  std::vector<float> download() const {
    std::vector<float> out(count);
    std::vector<uint16_t> half(count);
    void *dst = dl.dtype.bits == 16 ? static_cast<void *>(half.data()) : out.data();
    CHECK(xvk_memory_copy(ctx, dst, dl.data, count * dl.dtype.bits / 8));
    CHECK(xvk_context_synchronize(ctx));
    if (dl.dtype.bits == 16)
      for (size_t i = 0; i < count; ++i)
        out[i] = dl.dtype.code == kDLBfloat ? xvk::to_float(xvk::bfloat16_t{half[i]}) : xvk::to_float(xvk::half_t{half[i]});
    return out;
  }
};

// What an operator's tensor argument is: rows x cols activations, a vector
// of cols parameters, or a float32 statistic per row.
enum Kind { kMatrix, kColumns, kRowStats };
struct Arg {
  const char *name;  // host data is looked up and stored under this name
  Kind kind;
  bool output;
};
struct Case {
  const char *op;
  std::vector<Arg> args;
  std::function<xvk_status_t(xvk_context *, DLTensor **)> call;  // tensors in args order
};

std::vector<Case> cases() {
  const xvk_layer_norm_options ln = XVK_LAYER_NORM_OPTIONS_INIT;
  const xvk_rms_norm_options rms = XVK_RMS_NORM_OPTIONS_INIT;
  return {
      {"softmax_forward", {{"x", kMatrix, false}, {"softmax.y", kMatrix, true}},
       [](xvk_context *c, DLTensor **t) { return xvk_softmax_forward(c, t[0], nullptr, t[1]); }},
      {"log_softmax_forward", {{"x", kMatrix, false}, {"log_softmax.y", kMatrix, true}},
       [](xvk_context *c, DLTensor **t) { return xvk_log_softmax_forward(c, t[0], nullptr, t[1]); }},
      {"softmax_backward", {{"softmax.y", kMatrix, false}, {"dy", kMatrix, false}, {"softmax.dx", kMatrix, true}},
       [](xvk_context *c, DLTensor **t) { return xvk_softmax_backward(c, t[0], t[1], nullptr, t[2]); }},
      {"log_softmax_backward",
       {{"log_softmax.y", kMatrix, false}, {"dy", kMatrix, false}, {"log_softmax.dx", kMatrix, true}},
       [](xvk_context *c, DLTensor **t) { return xvk_log_softmax_backward(c, t[0], t[1], nullptr, t[2]); }},
      {"layer_norm_forward",
       {{"x", kMatrix, false}, {"gamma", kColumns, false}, {"beta", kColumns, false}, {"ln.y", kMatrix, true},
        {"ln.mean", kRowStats, true}, {"ln.rstd", kRowStats, true}},
       [ln](xvk_context *c, DLTensor **t) { return xvk_layer_norm_forward(c, t[0], t[1], t[2], &ln, t[3], t[4], t[5]); }},
      {"layer_norm_backward",
       {{"dy", kMatrix, false}, {"x", kMatrix, false}, {"gamma", kColumns, false}, {"ln.mean", kRowStats, false},
        {"ln.rstd", kRowStats, false}, {"ln.dx", kMatrix, true}, {"ln.dgamma", kColumns, true},
        {"ln.dbeta", kColumns, true}},
       [ln](xvk_context *c, DLTensor **t) {
         return xvk_layer_norm_backward(c, t[0], t[1], t[2], t[3], t[4], &ln, t[5], t[6], t[7]);
       }},
      {"rms_norm_forward",
       {{"x", kMatrix, false}, {"gamma", kColumns, false}, {"rms.y", kMatrix, true}, {"rms.rstd", kRowStats, true}},
       [rms](xvk_context *c, DLTensor **t) { return xvk_rms_norm_forward(c, t[0], t[1], &rms, t[2], t[3]); }},
      {"rms_norm_backward",
       {{"dy", kMatrix, false}, {"x", kMatrix, false}, {"gamma", kColumns, false}, {"rms.rstd", kRowStats, false},
        {"rms.dx", kMatrix, true}, {"rms.dgamma", kColumns, true}},
       [rms](xvk_context *c, DLTensor **t) { return xvk_rms_norm_backward(c, t[0], t[1], t[2], t[3], &rms, t[4], t[5]); }},
  };
}

using HostData = std::map<std::string, std::vector<float>>;

struct Result {
  HostData outputs;
  double median_ms;
};

// Uploads the case's inputs from `data` to ctx, times the call (median of 5
// after a warm-up, synchronized), and downloads its outputs.
Result run(xvk_context *ctx, const Case &c, DLDataType dtype, int64_t rows, int64_t cols, const HostData &data) {
  std::vector<std::unique_ptr<Tensor>> tensors;
  std::vector<DLTensor *> dl;
  for (const Arg &a : c.args) {
    const DLDataType type = a.kind == kRowStats ? DLDataType{kDLFloat, 32, 1} : dtype;
    std::vector<int64_t> shape = a.kind == kMatrix ? std::vector<int64_t>{rows, cols}
                                 : a.kind == kColumns ? std::vector<int64_t>{cols}
                                                      : std::vector<int64_t>{rows};
    tensors.push_back(std::make_unique<Tensor>(ctx, shape, type));
    if (!a.output) tensors.back()->upload(data.at(a.name));
    dl.push_back(&tensors.back()->dl);
  }
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    CHECK(c.call(ctx, dl.data()));
    CHECK(xvk_context_synchronize(ctx));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (rep > 0) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  Result r{{}, times[times.size() / 2]};
  for (size_t i = 0; i < c.args.size(); ++i)
    if (c.args[i].output) r.outputs[c.args[i].name] = tensors[i]->download();
  return r;
}

}  // namespace

int main() {
  std::printf("xvk %u.%u.%u\n\nBackends:\n", xvk_version() / 10000, xvk_version() / 100 % 100, xvk_version() % 100);
  xvk_backend_t best = XVK_BACKEND_CPU;
  for (xvk_backend_t b : {XVK_BACKEND_CPU, XVK_BACKEND_CUDA, XVK_BACKEND_HIP}) {
    int available = 0, devices = 0;
    const char *reason = "";
    CHECK(xvk_backend_query(b, &available, &devices, &reason));
    std::printf("  %-5s %-11s %s\n", xvk_backend_name(b), available ? "usable" : "not usable", reason);
    if (available && best == XVK_BACKEND_CPU) best = b;
  }
  xvk_context *cpu = nullptr, *dev = nullptr;
  CHECK(xvk_context_create(XVK_BACKEND_CPU, 0, &cpu));
  CHECK(xvk_context_create(best, 0, &dev));
  std::printf("\nRunning every operator on the %s backend, checked against the cpu backend%s.\n\n",
              xvk_backend_name(best), best == XVK_BACKEND_CPU ? " (itself: run the tests for the float64 oracle)" : "");

  const int64_t rows = 1024, cols = 1000;
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](size_t n, float mean, float sd) {
    std::vector<float> v(n);
    for (float &x : v) x = mean + sd * normal(rng);
    return v;
  };
  std::printf("%-22s %-5s %-10s %-12s %s\n", "operator", "dtype", "shape", "max |err|", "time (ms)");
  bool ok = true;
  for (DLDataType dtype : {DLDataType{kDLFloat, 32, 1}, DLDataType{kDLFloat, 16, 1}, DLDataType{kDLBfloat, 16, 1}}) {
    HostData data = {{"x", random(size_t(rows * cols), 0.5f, 2.0f)},
                     {"dy", random(size_t(rows * cols), 0.0f, 1.0f)},
                     {"gamma", random(size_t(cols), 1.0f, 0.1f)},
                     {"beta", random(size_t(cols), 0.0f, 0.1f)}};
    for (const Case &c : cases()) {
      const Result ref = run(cpu, c, dtype, rows, cols, data);
      const Result got = best == XVK_BACKEND_CPU ? ref : run(dev, c, dtype, rows, cols, data);
      double err = 0, scale = 0;
      for (const auto &[name, values] : ref.outputs) {
        const std::vector<float> &g = got.outputs.at(name);
        for (size_t i = 0; i < values.size(); ++i) {
          err = std::max(err, double(std::fabs(g[i] - values[i])));
          scale = std::max(scale, double(std::fabs(values[i])));
          if (std::isnan(g[i]) != std::isnan(values[i])) err = INFINITY;
        }
      }
      // The GPU may differ from the CPU reference by a few units in the last place of the dtype.
      const double unit = dtype.bits == 32 ? 1e-5 : dtype.code == kDLBfloat ? 2e-2 : 4e-3;
      const double tolerance = unit * std::max(scale, 1.0);
      ok = ok && err <= tolerance;
      data.insert(ref.outputs.begin(), ref.outputs.end());  // forward outputs feed the backward, as in training
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)cols);
      std::printf("%-22s %-5s %-10s %-12.3g %.3f%s\n", c.op, dtype_label(dtype), shape, err, got.median_ms,
                  err <= tolerance ? "" : "   <-- exceeds tolerance");
    }
  }
  CHECK(xvk_context_destroy(dev));
  CHECK(xvk_context_destroy(cpu));
  std::printf("\n%s\n", ok ? "All results match the cpu backend." : "SOME RESULTS DIFFER FROM THE CPU BACKEND.");
  return ok ? 0 : 1;
}
