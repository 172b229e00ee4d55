// GPU backend against the CPU backend, through the public API only.
//
// Every case builds the same tensors (same shape, strides, byte_offset, data)
// on a GPU context and on the CPU context, every output poisoned with NaN
// (test_support's Tensor), runs the operator on both and compares the logical
// elements under the agreement bound of test_support.hpp, and checks that
// bytes outside the logical elements (row padding, the guard element after
// the last one) were not touched. Runs on the CUDA backend, or the HIP one,
// whichever is usable (XVK_TEST_GPU_BACKEND=cuda|hip picks); exits 77 (CTest:
// skipped) when neither is.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace xvk_test;

namespace {

xvk_context *g_gpu = nullptr;
xvk_context *g_cpu = nullptr;
Rng g_rng(20261122);

#define XVK_OK(call) REQUIRE_MESSAGE((call) == XVK_SUCCESS, xvk_last_error_message())

// Where a tensor's elements lie in its allocation; the same placement is used
// on every context. Every tensor also gets one guard element after its last.
struct Layout {
  int64_t row_pad = 0;      // extra elements after each row (leading dims collapse onto rows)
  int64_t offset = 0;       // elements of byte_offset before the first element
  int normalized_ndim = 1;  // trailing dims that stay contiguous
};

std::unique_ptr<Tensor> make_tensor(xvk_context *ctx, const std::vector<int64_t> &shape, DType dtype,
                                    const Layout &l = {}) {
  const uint64_t elem = dtype_size(dtype);
  return std::make_unique<Tensor>(ctx, shape, dtype, padded_row_strides(shape, l.normalized_ndim, l.row_pad),
                                  uint64_t(l.offset) * elem, elem);
}

// One argument of an operator call, described once and built on both contexts.
struct Arg {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  bool output;
  Layout layout;
  std::vector<float> values;      // inputs
  bool null = false;              // pass NULL
  std::vector<double> row_floor;  // outputs: per-row floor for agreement_floor() (optional)
};

Arg input(std::string name, std::vector<int64_t> shape, DType dtype, Layout layout, std::vector<float> values,
          bool null = false) {
  return Arg{std::move(name), std::move(shape), dtype, false, layout, std::move(values), null, {}};
}

Arg output(std::string name, std::vector<int64_t> shape, DType dtype, Layout layout = {}, bool null = false,
           std::vector<double> row_floor = {}) {
  return Arg{std::move(name), std::move(shape), dtype, true, layout, {}, null, std::move(row_floor)};
}

using Call = std::function<xvk_status_t(xvk_context *, std::vector<DLTensor *> &)>;

// softmax or log_softmax forward without options, on arguments {x, y}.
Call softmax_forward(bool log) {
  return [log](xvk_context *c, std::vector<DLTensor *> &a) {
    return log ? xvk_log_softmax_forward(c, a[0], nullptr, a[1]) : xvk_softmax_forward(c, a[0], nullptr, a[1]);
  };
}

// Runs `call` on the GPU and the CPU with the same arguments and compares
// every output; returns the GPU outputs.
std::vector<std::vector<float>> check_against_cpu(const std::string &what, std::vector<Arg> args, const Call &call) {
  INFO(what);
  std::vector<std::unique_ptr<Tensor>> on_gpu, on_cpu;
  std::vector<DLTensor *> gpu_dl, cpu_dl;
  std::vector<Bytes> before(args.size());  // GPU outputs as poisoned
  // The inputs' scale counts every input's data, also of those passed as NULL.
  double input_scale = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg &a = args[i];
    if (!a.output) input_scale = std::max(input_scale, max_finite_magnitude(a.values));
    if (a.null) {
      on_gpu.emplace_back();
      on_cpu.emplace_back();
      gpu_dl.push_back(nullptr);
      cpu_dl.push_back(nullptr);
      continue;
    }
    on_gpu.push_back(make_tensor(g_gpu, a.shape, a.dtype, a.layout));
    on_cpu.push_back(make_tensor(g_cpu, a.shape, a.dtype, a.layout));
    if (a.output) {
      before[i] = on_gpu.back()->snapshot();
    } else {
      on_gpu.back()->fill(a.values);
      on_cpu.back()->fill(a.values);
    }
    gpu_dl.push_back(on_gpu.back()->dl());
    cpu_dl.push_back(on_cpu.back()->dl());
  }
  XVK_OK(call(g_cpu, cpu_dl));
  XVK_OK(call(g_gpu, gpu_dl));
  XVK_OK(xvk_context_synchronize(g_gpu));
  std::vector<std::vector<float>> results;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg &a = args[i];
    if (!a.output || a.null) continue;
    const std::string label = "output " + a.name + " " + dtype_name(a.dtype) + " " + shape_string(a.shape);
    CHECK_MESSAGE(on_gpu[i]->gaps_unchanged(before[i]), label << ": bytes outside its elements changed");
    std::vector<float> got = on_gpu[i]->read();
    const std::vector<float> cpu = on_cpu[i]->read();
    const std::vector<double> ref(cpu.begin(), cpu.end());
    const Comparison c =
        compare(label, got, ref, agreement_floor(ref, input_scale, a.row_floor), agreement_tolerance(a.dtype));
    CHECK_MESSAGE(c.ok, c.message());
    results.push_back(std::move(got));
  }
  return results;
}

// The column counts here differ from interesting_cols(): they go past the
// 32768 columns that the GPU kernels keep on chip and include model widths.
// XVK_TEST_QUICK=1 (for compute-sanitizer, which runs kernels far slower)
// keeps a subset that still reaches every variant and both access paths.
const bool kQuick = std::getenv("XVK_TEST_QUICK") != nullptr;
const std::vector<int64_t> kCols =
    kQuick ? std::vector<int64_t>{1, 3, 8, 33, 128, 257, 1000, 1024, 4096, 10007, 65536}
           : std::vector<int64_t>{1,    2,    3,    5,    7,    8,    13,    16,    31,    32,    33,    64,
                                  100,  127,  128,  257,  512,  768,  1000,  1024,  1031,  1536,  2048,  3001,
                                  4096, 5120, 8192, 10007, 16384, 32768, 65536, 100003};

int64_t rows_for(int64_t cols) {
  if (kQuick) return cols <= 128 ? 67 : 5;
  return cols <= 128 ? 517 : cols <= 2048 ? 67 : cols <= 16384 ? 9 : 3;
}

std::vector<Layout> layouts_for(int64_t cols) {
  // contiguous; aligned padding (keeps 16-byte rows when cols allow);
  // odd padding and an odd byte_offset (force the scalar path).
  return {Layout{}, Layout{8, 8, 1}, Layout{3, 1, 1}};
}

std::string layout_string(const Layout &l) {
  return " pad " + std::to_string(l.row_pad) + " offset " + std::to_string(l.offset);
}

}  // namespace

TEST_CASE("softmax and log_softmax forward and backward match the cpu backend") {
  for (DType t : kAllDtypes)
    for (int64_t cols : kCols)
      for (const Layout &l : layouts_for(cols)) {
        const int64_t rows = rows_for(cols);
        const std::vector<int64_t> shape = {rows, cols};
        const std::vector<float> x = g_rng.normal(size_t(rows * cols), 0.0, 3.0, t);
        const std::vector<float> dy = g_rng.normal(size_t(rows * cols), 0.0, 1.0, t);
        for (int log = 0; log < 2; ++log) {
          const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " " +
                                   shape_string(shape) + layout_string(l);
          const auto y = check_against_cpu(what + " forward", {input("x", shape, t, l, x), output("y", shape, t, l)},
                                           softmax_forward(log));
          if (y.empty()) continue;
          xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
          o.scale = 0.7f;
          check_against_cpu(what + " backward",
                            {input("y", shape, t, l, y[0]), input("dy", shape, t, l, dy), output("dx", shape, t, l)},
                            [log, o](xvk_context *c, std::vector<DLTensor *> &a) {
                              return log ? xvk_log_softmax_backward(c, a[0], a[1], &o, a[2])
                                         : xvk_softmax_backward(c, a[0], a[1], &o, a[2]);
                            });
        }
      }
}

TEST_CASE("softmax with scale, broadcast mask and causal masking") {
  for (DType t : kAllDtypes)
    for (int64_t keys : {1, 7, 64, 77, 1024, 2048, 40000})
      for (int causal : {XVK_CAUSAL_NONE, XVK_CAUSAL_TOP_LEFT, XVK_CAUSAL_BOTTOM_RIGHT})
        for (bool with_mask : {false, true}) {
          const int64_t batch = 2, heads = 3, queries = keys > 2048 ? 5 : std::min<int64_t>(keys + 3, 40);
          const std::vector<int64_t> shape = {batch, heads, queries, keys}, mask_shape = {batch, 1, queries, keys};
          std::vector<float> mask = g_rng.normal(size_t(batch * queries * keys), 0.0, 1.0, t);
          // Mask some elements out completely, and all of query row 1 of batch 0.
          for (size_t i = 0; i < mask.size(); ++i)
            if (i % 5 == 0 || (i / size_t(keys)) == 1) mask[i] = -INFINITY;
          xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
          o.scale = 0.125f;
          o.causal = causal;
          const std::string what = std::string("masked softmax ") + dtype_name(t) + " " + shape_string(shape) +
                                   " causal " + std::to_string(causal) + (with_mask ? " mask" : "");
          std::vector<Arg> args = {input("x", shape, t, {}, g_rng.normal(size_t(product(shape)), 0.0, 4.0, t)),
                                   output("y", shape, t),
                                   input("mask", mask_shape, t, {}, mask, !with_mask)};
          for (int log = 0; log < 2; ++log)
            check_against_cpu(what + (log ? " log" : ""), args, [&o, log](xvk_context *c, std::vector<DLTensor *> &a) {
              xvk_softmax_options opt = o;
              opt.mask = a[2];
              return log ? xvk_log_softmax_forward(c, a[0], &opt, a[1]) : xvk_softmax_forward(c, a[0], &opt, a[1]);
            });
        }
}

namespace {

// LayerNorm or RMSNorm forward and then backward on one configuration.
void check_norm(bool rms, DType t, DType pt, std::vector<int64_t> shape, int nd, Layout l, bool affine,
                bool residual, bool zero_centered, double mean, double sd, bool nan_in_row0 = false) {
  int64_t rows = 1, cols = 1;
  for (size_t k = 0; k < shape.size(); ++k) (int(k) < int(shape.size()) - nd ? rows : cols) *= shape[k];
  l.normalized_ndim = nd;
  const Layout params{0, 0, nd}, stats{};
  const std::vector<int64_t> pshape(shape.end() - nd, shape.end()), sshape = {rows};
  const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + (nan_in_row0 ? "with NaN " : "") +
                           dtype_name(t) + " params " + dtype_name(pt) + " " + shape_string(shape) + " nd " +
                           std::to_string(nd) + layout_string(l) + (affine ? " affine" : "") +
                           (residual ? " residual" : "") + (zero_centered ? " zero-centered" : "") + " mean " +
                           std::to_string(mean);
  const size_t n = size_t(rows * cols);
  std::vector<float> x = g_rng.normal(n, mean, sd, t);
  const std::vector<float> res = g_rng.normal(n, 0.0, sd, t);
  if (nan_in_row0) x[size_t(cols / 2)] = NAN;  // row 0 becomes NaN, and so do dgamma/dbeta
  const std::vector<float> gamma = g_rng.normal(size_t(cols), zero_centered ? 0.0 : 1.0, 0.2, pt);
  const std::vector<float> beta = g_rng.normal(size_t(cols), 0.0, 0.2, pt), dy = g_rng.normal(n, 0.0, 1.0, t);
  xvk_layer_norm_options lo = XVK_LAYER_NORM_OPTIONS_INIT;
  lo.normalized_ndim = nd;
  lo.zero_centered_gamma = zero_centered;
  xvk_rms_norm_options ro = XVK_RMS_NORM_OPTIONS_INIT;
  ro.normalized_ndim = nd;
  ro.zero_centered_gamma = zero_centered;
  std::vector<Arg> fwd = {input("x", shape, t, l, x),
                          input("gamma", pshape, pt, params, gamma, !affine),
                          input("beta", pshape, pt, params, beta, !affine || rms),
                          input("residual", shape, t, l, res, !residual),
                          output("y", shape, t, l),
                          output("residual_out", shape, t, l, !residual),
                          output("mean", sshape, DType::f32, stats, rms),
                          output("rstd", sshape, DType::f32, stats)};
  const auto out = check_against_cpu(what + " forward", fwd, [&](xvk_context *c, std::vector<DLTensor *> &a) {
    if (rms) {
      xvk_rms_norm_options o = ro;
      o.residual = a[3];
      o.residual_out = a[5];
      return xvk_rms_norm_forward(c, a[0], a[1], &o, a[4], a[7]);
    }
    xvk_layer_norm_options o = lo;
    o.residual = a[3];
    o.residual_out = a[5];
    return xvk_layer_norm_forward(c, a[0], a[1], a[2], &o, a[4], a[6], a[7]);
  });
  if (out.empty()) return;
  // Backward from the forward's input (h when a residual was added) and its statistics.
  const std::vector<float> &h = residual ? out[1] : x;
  const std::vector<float> &saved_mean = rms ? x : out[residual ? 2 : 1], &saved_rstd = out.back();
  const std::vector<double> dx_floor = norm_dx_row_floor(dy, saved_rstd, gamma, zero_centered);
  std::vector<Arg> bwd = {input("dy", shape, t, l, dy),
                          input("x", shape, t, l, h),
                          input("gamma", pshape, pt, params, gamma, !affine),
                          input("mean", sshape, DType::f32, stats, saved_mean, rms),
                          input("rstd", sshape, DType::f32, stats, saved_rstd),
                          output("dx", shape, t, l, false, dx_floor),
                          output("dgamma", pshape, pt, params),
                          output("dbeta", pshape, pt, params, rms)};
  auto run_backward = [&](xvk_context *c, std::vector<DLTensor *> &a) {
    return rms ? xvk_rms_norm_backward(c, a[0], a[1], a[2], a[4], &ro, a[5], a[6])
               : xvk_layer_norm_backward(c, a[0], a[1], a[2], a[3], a[4], &lo, a[5], a[6], a[7]);
  };
  const auto first = check_against_cpu(what + " backward", bwd, run_backward);
  // dgamma/dbeta come from a reduction over rows: the same inputs give the same bits.
  const auto second = check_against_cpu(what + " backward again", bwd, run_backward);
  REQUIRE(first.size() == second.size());
  for (size_t i = 0; i < first.size(); ++i)
    CHECK_MESSAGE(std::memcmp(first[i].data(), second[i].data(), first[i].size() * sizeof(float)) == 0,
                  what << ": output " << i << " differs between two identical runs");
}

}  // namespace

TEST_CASE("layer_norm and rms_norm forward and backward match the cpu backend") {
  for (bool rms : {false, true})
    for (DType t : kAllDtypes)
      for (int64_t cols : kCols) {
        const int64_t rows = rows_for(cols);
        for (const Layout &l : layouts_for(cols)) check_norm(rms, t, t, {rows, cols}, 1, l, true, false, false, 0.5, 2.0);
        // Options: mixed-precision params, residual, zero-centered gamma, no params.
        if (cols % 64 == 1 || cols == 768 || cols == 4096 || cols == 13) {
          check_norm(rms, t, DType::f32, {rows, cols}, 1, {}, true, true, true, 0.0, 1.0);
          check_norm(rms, t, t, {rows, cols}, 1, {}, false, true, false, 0.0, 1.0);
        }
      }
}

TEST_CASE("norms: large offsets, two normalized dims, and more than 65535 rows") {
  for (bool rms : {false, true}) {
    // mean 1e4, std 1e-2: float32 variance from sums of squares would be noise.
    for (int64_t cols : {64, 768, 4096, 100003})
      check_norm(rms, DType::f32, DType::f32, {rows_for(cols), cols}, 1, {}, true, false, false, 1e4, 1e-2);
    check_norm(rms, DType::f16, DType::f32, {5, 12, 40}, 2, {}, true, true, false, 0.0, 1.0);
    check_norm(rms, DType::bf16, DType::bf16, {70001, 32}, 1, {}, true, false, false, 0.0, 1.0);
    check_norm(rms, DType::f16, DType::f16, {66000, 3}, 1, {}, true, false, false, 0.0, 1.0);
  }
}

// The sm_90 table gives these shapes to the cluster backward, whose blocks
// meet each row's sums through two transaction barriers taken in turn: with
// some 15 rows per cluster each barrier goes through several phases (the
// suite's other wide shapes have a row or two per cluster).
TEST_CASE("norm backward: many rows per thread block cluster") {
  if (kQuick) return;  // large for compute-sanitizer; test_gpu_variants covers the kernel there
  for (bool rms : {false, true}) {
    check_norm(rms, DType::f16, DType::f16, {1001, 16384}, 1, {}, true, false, false, 0.0, 1.0);
    check_norm(rms, DType::bf16, DType::f32, {513, 32768}, 1, {}, true, false, false, 0.0, 1.0);
  }
}

TEST_CASE("softmax: more than 65535 rows, NaN rows, fully masked rows") {
  for (DType t : {DType::f32, DType::bf16}) {
    const std::vector<int64_t> shape = {70001, 24};
    check_against_cpu(std::string("softmax many rows ") + dtype_name(t),
                      {input("x", shape, t, {}, g_rng.normal(70001 * 24, 0.0, 2.0, t)), output("y", shape, t)},
                      softmax_forward(false));
  }
  for (int64_t cols : {5, 64, 3000, 70000}) {
    const std::vector<int64_t> shape = {4, cols};
    std::vector<float> x = g_rng.normal(size_t(4 * cols), 0.0, 1.0);
    x[size_t(cols / 2)] = NAN;                                          // row 0: a NaN
    for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] = -INFINITY;  // row 1: fully masked
    x[size_t(2 * cols)] = INFINITY;                                      // row 2: +inf
    for (int log = 0; log < 2; ++log) {
      const auto y = check_against_cpu("softmax specials " + std::to_string(cols),
                                       {input("x", shape, DType::f32, {}, x), output("y", shape, DType::f32)},
                                       softmax_forward(log));
      REQUIRE(!y.empty());
      CHECK(std::isnan(y[0][0]));
      CHECK(y[0][size_t(cols)] == (log ? -INFINITY : 0.0f));
    }
    for (bool rms : {false, true}) check_norm(rms, DType::f32, DType::f32, {4, cols}, 1, {}, true, false, false, 0, 1, true);
  }
}

TEST_CASE("a tensor of more than 2^31 elements") {
  // 2^21 + 5 rows of 1024 float16 values: the last rows lie past 2^31 elements.
  // The data repeats every `period` rows, so references come from a small tensor.
  const int64_t rows = (int64_t(1) << 21) + 5, cols = 1024, period = 64;
  const std::vector<int64_t> shape = {rows, cols}, small_shape = {period, cols};
  const auto x = make_tensor(g_gpu, shape, DType::f16), y = make_tensor(g_gpu, shape, DType::f16);
  const auto xs = make_tensor(g_cpu, small_shape, DType::f16), ys = make_tensor(g_cpu, small_shape, DType::f16);
  const std::vector<float> block_values = g_rng.normal(size_t(period * cols), 0.0, 2.0, DType::f16);
  xs->fill(block_values);
  const Bytes block = xs->snapshot();
  for (int64_t r = 0; r < rows; r += period)
    copy_to_device(g_gpu, static_cast<unsigned char *>(x->allocation()) + x->byte_of(r * cols),
                   block.data() + xs->byte_of(0), size_t(std::min(period, rows - r) * cols) * dtype_size(DType::f16));
  for (int op = 0; op < 2; ++op) {
    INFO((op == 0 ? "softmax" : "layer_norm"));
    XVK_OK(op == 0 ? xvk_softmax_forward(g_gpu, x->dl(), nullptr, y->dl())
                   : xvk_layer_norm_forward(g_gpu, x->dl(), nullptr, nullptr, nullptr, y->dl(), nullptr, nullptr));
    XVK_OK(op == 0 ? xvk_softmax_forward(g_cpu, xs->dl(), nullptr, ys->dl())
                   : xvk_layer_norm_forward(g_cpu, xs->dl(), nullptr, nullptr, nullptr, ys->dl(), nullptr, nullptr));
    XVK_OK(xvk_context_synchronize(g_gpu));
    const std::vector<float> small_ref = ys->read();
    // Compare the first rows and the last ones (beyond 2^31 elements).
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t r : {int64_t(0), int64_t(1), rows - 70, rows - 2, rows - 1}) {
      const std::vector<float> row = y->read(r * cols, cols);
      got.insert(got.end(), row.begin(), row.end());
      const int64_t k = (r % period) * cols;
      ref.insert(ref.end(), small_ref.begin() + k, small_ref.begin() + k + cols);
    }
    // A fixed floor of 0.05 instead of agreement_floor(), which would be
    // looser here (1% of the inputs' scale for softmax, 5% of |y| ~ 4 for
    // layer_norm).
    const Comparison c = compare("rows 0, 1, -70, -2, -1 of y", got, ref, std::vector<double>(ref.size(), 0.05),
                                 agreement_tolerance(DType::f16));
    CHECK_MESSAGE(c.ok, c.message());
  }
}

int main(int argc, char **argv) {
  const char *want = std::getenv("XVK_TEST_GPU_BACKEND");
  std::string reasons;
  xvk_backend_t chosen = XVK_BACKEND_CPU;
  // Debugging the suite itself on a machine without a GPU: XVK_TEST_GPU_BACKEND=cpu
  // compares the CPU backend with itself (so it proves nothing about a GPU).
  const bool self_check = want && std::strcmp(want, "cpu") == 0;
  for (xvk_backend_t b : {XVK_BACKEND_CUDA, XVK_BACKEND_HIP}) {
    if (want && std::strcmp(want, xvk_backend_name(b)) != 0) continue;
    int available = 0;
    const char *reason = "";
    xvk_backend_query(b, &available, nullptr, &reason);
    if (available) {
      chosen = b;
      break;
    }
    reasons += std::string(reasons.empty() ? "" : "; ") + xvk_backend_name(b) + ": " + reason;
  }
  if (chosen == XVK_BACKEND_CPU && !self_check) {
    std::printf("SKIPPED test_gpu_ops: no usable GPU backend (%s)\n", reasons.c_str());
    return 77;
  }
  std::printf("test_gpu_ops on the %s backend\n", xvk_backend_name(chosen));
  std::unique_ptr<Context> gpu, cpu;
  try {
    gpu = std::make_unique<Context>(chosen);
    cpu = std::make_unique<Context>(XVK_BACKEND_CPU);
  } catch (const std::runtime_error &e) {
    std::printf("context creation failed: %s\n", e.what());
    return 1;
  }
  g_gpu = *gpu;
  g_cpu = *cpu;
  doctest::Context context(argc, argv);
  return context.run();
}
