// GPU backend against the CPU backend, through the public API only.
//
// Every case builds the same tensors (same shape, strides, byte_offset, data)
// on a GPU context and on the CPU context, poisons every output with NaN
// bytes, runs the operator on both and compares the logical elements, and
// checks that bytes outside the logical elements (row padding) were not
// touched. Runs on the CUDA backend, or the HIP one, whichever is usable
// (XVK_TEST_GPU_BACKEND=cuda|hip picks); exits 77 (CTest: skipped) when
// neither is.
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
#include <random>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "xvk/xvk.h"

namespace {

xvk_context *g_gpu = nullptr;
xvk_context *g_cpu = nullptr;

#define XVK_OK(call) REQUIRE_MESSAGE((call) == XVK_SUCCESS, xvk_last_error_message())

const DLDataType kF32{kDLFloat, 32, 1}, kF16{kDLFloat, 16, 1}, kBF16{kDLBfloat, 16, 1};
const char *name_of(DLDataType t) { return t.code == kDLBfloat ? "bf16" : t.bits == 16 ? "fp16" : "fp32"; }

// Tolerance of a GPU result against the CPU reference, per output dtype: the
// GPU computes in float32 (with __expf, rsqrtf) where the CPU uses float64,
// and both round to the output dtype, so results may differ by about one unit
// in the last place of that dtype. float32 arithmetic also leaves an error
// proportional to the magnitude of the terms an element is made of, which
// can be far larger than the element after cancellation; the absolute part
// of the bound follows those terms: a share of the output's overall scale,
// of the inputs' scale (statistics such as the mean are small while their
// error follows the data), or an operator-specific per-row scale (Arg::floor).
double tolerance(DLDataType t) { return t.bits == 32 ? 2e-5 : t.code == kDLBfloat ? 1.6e-2 : 2e-3; }

// A logical tensor placed in one allocation with padded rows and a byte
// offset; the same placement is used on every context.
struct Layout {
  int64_t row_pad = 0;     // extra elements after each row (leading dims collapse onto rows)
  int64_t offset = 0;      // elements of byte_offset before the first element
  int normalized_ndim = 1; // trailing dims that stay contiguous
};

struct Tensor {
  xvk_context *ctx;
  std::vector<int64_t> shape, strides;
  DLDataType dtype;
  DLTensor dl{};
  size_t alloc_elems = 0;
  int64_t rows = 1, cols = 1, row_stride = 1;
  Layout layout;

  Tensor(xvk_context *c, std::vector<int64_t> s, DLDataType t, Layout l = {}) : ctx(c), shape(std::move(s)), dtype(t), layout(l) {
    const int nd = int(shape.size());
    const int lead = nd - std::min(l.normalized_ndim, nd);
    for (int k = lead; k < nd; ++k) cols *= shape[size_t(k)];
    for (int k = 0; k < lead; ++k) rows *= shape[size_t(k)];
    row_stride = cols + l.row_pad;
    strides.assign(size_t(nd), 1);
    int64_t step = 1;
    for (int k = nd - 1; k >= lead; --k) strides[size_t(k)] = step, step *= shape[size_t(k)];
    step = row_stride;
    for (int k = lead - 1; k >= 0; --k) strides[size_t(k)] = step, step *= shape[size_t(k)];
    alloc_elems = size_t(l.offset + (rows > 0 ? (rows - 1) * row_stride + cols : 0)) + 1;
    xvk_backend_t backend;
    int device;
    REQUIRE(xvk_context_get_device(ctx, &backend, &device) == XVK_SUCCESS);
    dl.device = {backend == XVK_BACKEND_CUDA ? kDLCUDA : backend == XVK_BACKEND_HIP ? kDLROCM : kDLCPU, device};
    dl.ndim = nd;
    dl.dtype = t;
    dl.shape = shape.data();
    dl.strides = strides.data();
    dl.byte_offset = uint64_t(l.offset) * (t.bits / 8);
    XVK_OK(xvk_memory_alloc(ctx, alloc_elems * (t.bits / 8), &dl.data));
    poison();
  }
  Tensor(const Tensor &) = delete;
  ~Tensor() { xvk_memory_free(ctx, dl.data); }
  size_t es() const { return dtype.bits / 8; }

  std::vector<uint8_t> raw() const {
    std::vector<uint8_t> bytes(alloc_elems * es());
    REQUIRE(xvk_memory_copy(ctx, bytes.data(), dl.data, bytes.size()) == XVK_SUCCESS);
    REQUIRE(xvk_context_synchronize(ctx) == XVK_SUCCESS);
    return bytes;
  }
  void set_raw(const std::vector<uint8_t> &bytes) {
    REQUIRE(xvk_memory_copy(ctx, dl.data, bytes.data(), bytes.size()) == XVK_SUCCESS);
    REQUIRE(xvk_context_synchronize(ctx) == XVK_SUCCESS);
  }
  // All-ones bytes: NaN in every float format.
  void poison() { set_raw(std::vector<uint8_t>(alloc_elems * es(), 0xff)); }

  size_t index(int64_t r, int64_t c) const { return size_t(layout.offset + r * row_stride + c); }
  void upload(const std::vector<float> &v) {
    std::vector<uint8_t> bytes(alloc_elems * es(), 0xff);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) put(bytes, index(r, c), v[size_t(r * cols + c)]);
    set_raw(bytes);
  }
  std::vector<float> download() const {
    const std::vector<uint8_t> bytes = raw();
    std::vector<float> v(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) v[size_t(r * cols + c)] = get(bytes, index(r, c));
    return v;
  }
  // Every byte outside the logical elements still holds the poison.
  bool padding_untouched() const {
    const std::vector<uint8_t> bytes = raw();
    std::vector<bool> logical(alloc_elems, false);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) logical[index(r, c)] = true;
    for (size_t i = 0; i < alloc_elems; ++i)
      if (!logical[i])
        for (size_t b = 0; b < es(); ++b)
          if (bytes[i * es() + b] != 0xff) return false;
    return true;
  }
  void put(std::vector<uint8_t> &bytes, size_t i, float f) const {
    if (dtype.bits == 32) return std::memcpy(&bytes[i * 4], &f, 4), void();
    const uint16_t h = dtype.code == kDLBfloat ? xvk::to_bfloat16(f).bits : xvk::to_half(f).bits;
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  float get(const std::vector<uint8_t> &bytes, size_t i) const {
    if (dtype.bits == 32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return dtype.code == kDLBfloat ? xvk::to_float(xvk::bfloat16_t{h}) : xvk::to_float(xvk::half_t{h});
  }
};

std::mt19937_64 g_rng(20261122);

std::vector<float> random_values(size_t n, float mean, float sd) {
  std::normal_distribution<float> normal(mean, sd);
  std::vector<float> v(n);
  for (float &x : v) x = normal(g_rng);
  return v;
}

// One argument of an operator call, described once and built on both contexts.
struct Arg {
  std::string name;
  std::vector<int64_t> shape;
  DLDataType dtype;
  bool output;
  Layout layout;
  std::vector<float> values;  // inputs
  bool null = false;          // pass NULL
  std::vector<double> floor;  // outputs: per-row magnitude of the terms behind an element (optional)
};

using Call = std::function<xvk_status_t(xvk_context *, std::vector<DLTensor *> &)>;

// Runs `call` on the GPU and the CPU with the same arguments and compares
// every output; returns the GPU outputs.
std::vector<std::vector<float>> check_against_cpu(const std::string &what, std::vector<Arg> args, const Call &call) {
  INFO(what);
  std::vector<std::unique_ptr<Tensor>> on_gpu, on_cpu;
  std::vector<DLTensor *> gpu_dl, cpu_dl;
  for (const Arg &a : args) {
    if (a.null) {
      on_gpu.emplace_back();
      on_cpu.emplace_back();
      gpu_dl.push_back(nullptr);
      cpu_dl.push_back(nullptr);
      continue;
    }
    on_gpu.push_back(std::make_unique<Tensor>(g_gpu, a.shape, a.dtype, a.layout));
    on_cpu.push_back(std::make_unique<Tensor>(g_cpu, a.shape, a.dtype, a.layout));
    if (!a.output) {
      on_gpu.back()->upload(a.values);
      on_cpu.back()->upload(a.values);
    }
    gpu_dl.push_back(&on_gpu.back()->dl);
    cpu_dl.push_back(&on_cpu.back()->dl);
  }
  double input_scale = 0;
  for (const Arg &a : args)
    if (!a.output)
      for (float v : a.values)
        if (std::isfinite(v)) input_scale = std::max(input_scale, double(std::fabs(v)));
  XVK_OK(call(g_cpu, cpu_dl));
  XVK_OK(call(g_gpu, gpu_dl));
  XVK_OK(xvk_context_synchronize(g_gpu));
  std::vector<std::vector<float>> results;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].output || args[i].null) continue;
    INFO("output " << args[i].name << " " << name_of(args[i].dtype));
    const std::vector<float> ref = on_cpu[i]->download(), got = on_gpu[i]->download();
    CHECK(on_gpu[i]->padding_untouched());
    double scale = 0;
    for (float r : ref)
      if (std::isfinite(r)) scale = std::max(scale, double(std::fabs(r)));
    const double tol = tolerance(args[i].dtype);
    const double base_floor = std::max(0.05 * scale, 0.01 * input_scale);
    const size_t cols_of = size_t(on_cpu[i]->cols);
    size_t bad = 0, first_bad = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      const double r = ref[k], g = got[k];
      const double floor = args[i].floor.empty() ? base_floor : std::max(base_floor, args[i].floor[k / cols_of]);
      const bool ok = std::isnan(r) ? std::isnan(g)
                      : std::isinf(r) ? g == r
                                      : std::fabs(g - r) <= tol * (std::fabs(r) + floor);
      if (!ok && bad++ == 0) first_bad = k;
    }
    if (bad) {
      const int64_t cols = on_cpu[i]->cols;
      FAIL_CHECK(bad << " of " << ref.size() << " elements differ; first at row " << first_bad / size_t(cols)
                     << " col " << first_bad % size_t(cols) << ": gpu " << got[first_bad] << " cpu " << ref[first_bad]
                     << " (scale " << scale << ")");
    }
    results.push_back(got);
  }
  return results;
}

std::string shape_str(const std::vector<int64_t> &s) {
  std::string out;
  for (int64_t d : s) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

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

}  // namespace

TEST_CASE("softmax and log_softmax forward and backward match the cpu backend") {
  for (DLDataType t : {kF32, kF16, kBF16})
    for (int64_t cols : kCols)
      for (const Layout &l : layouts_for(cols)) {
        const int64_t rows = rows_for(cols);
        const std::vector<int64_t> shape = {rows, cols};
        const std::vector<float> x = random_values(size_t(rows * cols), 0.0f, 3.0f);
        const std::vector<float> dy = random_values(size_t(rows * cols), 0.0f, 1.0f);
        for (int log = 0; log < 2; ++log) {
          const std::string what = std::string(log ? "log_softmax " : "softmax ") + name_of(t) + " " + shape_str(shape) +
                                   " pad " + std::to_string(l.row_pad) + " offset " + std::to_string(l.offset);
          const auto y = check_against_cpu(what + " forward", {{"x", shape, t, false, l, x}, {"y", shape, t, true, l, {}}},
                                           [log](xvk_context *c, std::vector<DLTensor *> &a) {
                                             return log ? xvk_log_softmax_forward(c, a[0], nullptr, a[1])
                                                        : xvk_softmax_forward(c, a[0], nullptr, a[1]);
                                           });
          if (y.empty()) continue;
          xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
          o.scale = 0.7f;
          check_against_cpu(what + " backward",
                            {{"y", shape, t, false, l, y[0]}, {"dy", shape, t, false, l, dy}, {"dx", shape, t, true, l, {}}},
                            [log, o](xvk_context *c, std::vector<DLTensor *> &a) {
                              return log ? xvk_log_softmax_backward(c, a[0], a[1], &o, a[2])
                                         : xvk_softmax_backward(c, a[0], a[1], &o, a[2]);
                            });
        }
      }
}

TEST_CASE("softmax with scale, broadcast mask and causal masking") {
  for (DLDataType t : {kF32, kF16, kBF16})
    for (int64_t keys : {1, 7, 64, 77, 1024, 2048, 40000})
      for (int causal : {XVK_CAUSAL_NONE, XVK_CAUSAL_TOP_LEFT, XVK_CAUSAL_BOTTOM_RIGHT})
        for (bool with_mask : {false, true}) {
          const int64_t batch = 2, heads = 3, queries = keys > 2048 ? 5 : std::min<int64_t>(keys + 3, 40);
          const std::vector<int64_t> shape = {batch, heads, queries, keys}, mask_shape = {batch, 1, queries, keys};
          std::vector<float> mask = random_values(size_t(batch * queries * keys), 0.0f, 1.0f);
          // Mask some elements out completely, and all of query row 1 of batch 0.
          for (size_t i = 0; i < mask.size(); ++i)
            if (i % 5 == 0 || (i / size_t(keys)) == 1) mask[i] = -INFINITY;
          xvk_softmax_options o = XVK_SOFTMAX_OPTIONS_INIT;
          o.scale = 0.125f;
          o.causal = causal;
          const std::string what = std::string("masked softmax ") + name_of(t) + " " + shape_str(shape) + " causal " +
                                   std::to_string(causal) + (with_mask ? " mask" : "");
          std::vector<Arg> args = {{"x", shape, t, false, {}, random_values(size_t(batch * heads * queries * keys), 0, 4)},
                                   {"y", shape, t, true, {}, {}},
                                   {"mask", mask_shape, t, false, {}, mask, !with_mask}};
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
void check_norm(bool rms, DLDataType t, DLDataType pt, std::vector<int64_t> shape, int nd, Layout l, bool affine,
                bool residual, bool zero_centered, float mean, float sd, bool nan_in_row0 = false) {
  int64_t rows = 1, cols = 1;
  for (size_t k = 0; k < shape.size(); ++k) (int(k) < int(shape.size()) - nd ? rows : cols) *= shape[k];
  l.normalized_ndim = nd;
  const std::vector<int64_t> pshape(shape.end() - nd, shape.end()), sshape = {rows};
  const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + (nan_in_row0 ? "with NaN " : "") + name_of(t) + " params " + name_of(pt) + " " +
                           shape_str(shape) + " nd " + std::to_string(nd) + " pad " + std::to_string(l.row_pad) +
                           " offset " + std::to_string(l.offset) + (affine ? " affine" : "") +
                           (residual ? " residual" : "") + (zero_centered ? " zero-centered" : "") + " mean " +
                           std::to_string(mean);
  const size_t n = size_t(rows * cols);
  std::vector<float> x = random_values(n, mean, sd);
  const std::vector<float> res = random_values(n, 0.0f, sd);
  if (nan_in_row0) x[size_t(cols / 2)] = NAN;  // row 0 becomes NaN, and so do dgamma/dbeta
  const std::vector<float> gamma = random_values(size_t(cols), zero_centered ? 0.0f : 1.0f, 0.2f);
  const std::vector<float> beta = random_values(size_t(cols), 0.0f, 0.2f), dy = random_values(n, 0.0f, 1.0f);
  xvk_layer_norm_options lo = XVK_LAYER_NORM_OPTIONS_INIT;
  lo.normalized_ndim = nd;
  lo.zero_centered_gamma = zero_centered;
  xvk_rms_norm_options ro = XVK_RMS_NORM_OPTIONS_INIT;
  ro.normalized_ndim = nd;
  ro.zero_centered_gamma = zero_centered;
  const Layout stats{};
  std::vector<Arg> fwd = {{"x", shape, t, false, l, x},
                          {"gamma", pshape, pt, false, {0, 0, nd}, gamma, !affine},
                          {"beta", pshape, pt, false, {0, 0, nd}, beta, !affine || rms},
                          {"residual", shape, t, false, l, res, !residual},
                          {"y", shape, t, true, l, {}},
                          {"residual_out", shape, t, true, l, {}, !residual},
                          {"mean", sshape, kF32, true, stats, {}, rms},
                          {"rstd", sshape, kF32, true, stats, {}}};
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
  // dx is rstd * (dy * g - c1 - xhat * c2): its error follows rstd * |dy * g|.
  double gmax = 1;
  for (float g : gamma) gmax = std::max(gmax, double(std::fabs(g)) + (zero_centered ? 1.0 : 0.0));
  std::vector<double> dx_floor(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double dmax = 0;
    for (int64_t c = 0; c < cols; ++c) dmax = std::max(dmax, double(std::fabs(dy[size_t(r * cols + c)])));
    dx_floor[size_t(r)] = std::fabs(double(saved_rstd[size_t(r)])) * dmax * gmax;
  }
  std::vector<Arg> bwd = {{"dy", shape, t, false, l, dy},
                          {"x", shape, t, false, l, h},
                          {"gamma", pshape, pt, false, {0, 0, nd}, gamma, !affine},
                          {"mean", sshape, kF32, false, stats, saved_mean, rms},
                          {"rstd", sshape, kF32, false, stats, saved_rstd},
                          {"dx", shape, t, true, l, {}, false, dx_floor},
                          {"dgamma", pshape, pt, true, {0, 0, nd}, {}},
                          {"dbeta", pshape, pt, true, {0, 0, nd}, {}, rms}};
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
    for (DLDataType t : {kF32, kF16, kBF16})
      for (int64_t cols : kCols) {
        const int64_t rows = rows_for(cols);
        for (const Layout &l : layouts_for(cols))
          check_norm(rms, t, t, {rows, cols}, 1, l, true, false, false, 0.5f, 2.0f);
        // Options: mixed-precision params, residual, zero-centered gamma, no params.
        if (cols % 64 == 1 || cols == 768 || cols == 4096 || cols == 13) {
          check_norm(rms, t, kF32, {rows, cols}, 1, {}, true, true, true, 0.0f, 1.0f);
          check_norm(rms, t, t, {rows, cols}, 1, {}, false, true, false, 0.0f, 1.0f);
        }
      }
}

TEST_CASE("norms: large offsets, two normalized dims, and more than 65535 rows") {
  for (bool rms : {false, true}) {
    // mean 1e4, std 1e-2: float32 variance from sums of squares would be noise.
    for (int64_t cols : {64, 768, 4096, 100003}) check_norm(rms, kF32, kF32, {rows_for(cols), cols}, 1, {}, true, false, false, 1e4f, 1e-2f);
    check_norm(rms, kF16, kF32, {5, 12, 40}, 2, {}, true, true, false, 0.0f, 1.0f);
    check_norm(rms, kBF16, kBF16, {70001, 32}, 1, {}, true, false, false, 0.0f, 1.0f);
    check_norm(rms, kF16, kF16, {66000, 3}, 1, {}, true, false, false, 0.0f, 1.0f);
  }
}

TEST_CASE("softmax: more than 65535 rows, NaN rows, fully masked rows") {
  for (DLDataType t : {kF32, kBF16}) {
    const std::vector<int64_t> shape = {70001, 24};
    check_against_cpu(std::string("softmax many rows ") + name_of(t),
                      {{"x", shape, t, false, {}, random_values(70001 * 24, 0, 2)}, {"y", shape, t, true, {}, {}}},
                      [](xvk_context *c, std::vector<DLTensor *> &a) { return xvk_softmax_forward(c, a[0], nullptr, a[1]); });
  }
  for (int64_t cols : {5, 64, 3000, 70000}) {
    const std::vector<int64_t> shape = {4, cols};
    std::vector<float> x = random_values(size_t(4 * cols), 0, 1);
    x[size_t(cols / 2)] = NAN;                                          // row 0: a NaN
    for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] = -INFINITY;  // row 1: fully masked
    x[size_t(2 * cols)] = INFINITY;                                      // row 2: +inf
    for (int log = 0; log < 2; ++log) {
      const auto y = check_against_cpu("softmax specials " + std::to_string(cols),
                                       {{"x", shape, kF32, false, {}, x}, {"y", shape, kF32, true, {}, {}}},
                                       [log](xvk_context *c, std::vector<DLTensor *> &a) {
                                         return log ? xvk_log_softmax_forward(c, a[0], nullptr, a[1])
                                                    : xvk_softmax_forward(c, a[0], nullptr, a[1]);
                                       });
      REQUIRE(!y.empty());
      CHECK(std::isnan(y[0][0]));
      CHECK(y[0][size_t(cols)] == (log ? -INFINITY : 0.0f));
    }
    for (bool rms : {false, true}) check_norm(rms, kF32, kF32, {4, cols}, 1, {}, true, false, false, 0, 1, true);
  }
}

TEST_CASE("a tensor of more than 2^31 elements") {
  // 2^21 + 5 rows of 1024 float16 values: the last rows lie past 2^31 elements.
  // The data repeats every kPeriod rows, so references come from a small tensor.
  const int64_t rows = (int64_t(1) << 21) + 5, cols = 1024, period = 64;
  const std::vector<int64_t> shape = {rows, cols}, small_shape = {period, cols};
  Tensor x(g_gpu, shape, kF16), y(g_gpu, shape, kF16);
  Tensor xs(g_cpu, small_shape, kF16), ys(g_cpu, small_shape, kF16);
  xs.upload(random_values(size_t(period * cols), 0, 2));
  const std::vector<uint8_t> block = xs.raw();
  const size_t block_bytes = size_t(period * cols) * 2;
  for (int64_t r = 0; r < rows; r += period)
    XVK_OK(xvk_memory_copy(g_gpu, static_cast<char *>(x.dl.data) + size_t(r * cols) * 2, block.data(),
                           size_t(std::min(period, rows - r) * cols) * 2));
  for (int op = 0; op < 2; ++op) {
    INFO((op == 0 ? "softmax" : "layer_norm"));
    XVK_OK(op == 0 ? xvk_softmax_forward(g_gpu, &x.dl, nullptr, &y.dl)
                   : xvk_layer_norm_forward(g_gpu, &x.dl, nullptr, nullptr, nullptr, &y.dl, nullptr, nullptr));
    XVK_OK(op == 0 ? xvk_softmax_forward(g_cpu, &xs.dl, nullptr, &ys.dl)
                   : xvk_layer_norm_forward(g_cpu, &xs.dl, nullptr, nullptr, nullptr, &ys.dl, nullptr, nullptr));
    const std::vector<float> ref = ys.download();
    // Compare the first rows and the last ones (beyond 2^31 elements).
    std::vector<uint16_t> got(static_cast<size_t>(cols));
    for (int64_t r : {int64_t(0), int64_t(1), rows - 70, rows - 2, rows - 1}) {
      XVK_OK(xvk_memory_copy(g_gpu, got.data(), static_cast<char *>(y.dl.data) + size_t(r * cols) * 2, size_t(cols) * 2));
      XVK_OK(xvk_context_synchronize(g_gpu));
      for (int64_t c = 0; c < cols; ++c) {
        const float g = xvk::to_float(xvk::half_t{got[size_t(c)]}), want = ref[size_t((r % period) * cols + c)];
        if (!(std::fabs(g - want) <= 2e-3 * (std::fabs(want) + 0.05f))) {
          FAIL_CHECK("row " << r << " col " << c << ": gpu " << g << " cpu " << want);
          break;
        }
      }
    }
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
  if (xvk_context_create(chosen, 0, &g_gpu) != XVK_SUCCESS || xvk_context_create(XVK_BACKEND_CPU, 0, &g_cpu) != XVK_SUCCESS) {
    std::printf("context creation failed: %s\n", xvk_last_error_message());
    return 1;
  }
  doctest::Context context(argc, argv);
  const int result = context.run();
  xvk_context_destroy(g_gpu);
  xvk_context_destroy(g_cpu);
  return result;
}
