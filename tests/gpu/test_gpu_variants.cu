// Every launch configuration of the row-wise CUDA kernels, forced one at a
// time, against the CPU backend's reference on the same data.
//
// The public-API suite (test_gpu_ops) reaches the variants that the tuning
// table picks for its shapes; this one runs all of candidate_configs() (what
// the tuner may pick) on each shape below, and each again with one resident
// block per SM so that blocks loop over several rows (XVK_TEST_QUICK=1, for
// compute-sanitizer: fewer shapes, no capped runs). It calls the kernels
// and the CPU reference (src/cpu, compiled in) directly, with contiguous rows:
// strides, offsets and validation belong to test_gpu_ops. Every output is
// poisoned (all bits set: NaN) before each run. Exits 77 (CTest: skipped)
// without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "cpu/cpu_ops.hpp"
#include "cuda/launch.cuh"
#include "test_support.hpp"

using namespace xvk_test;
namespace gpu = xvk::gpu;

namespace {

gpu::Context g_ctx;  // the kernels' context on device 0, default stream
Rng g_rng(20261123);
const bool kQuick = std::getenv("XVK_TEST_QUICK") != nullptr;

#define CUDA_REQUIRE(call) REQUIRE_MESSAGE((call) == cudaSuccess, cudaGetErrorString(cudaGetLastError()))

int dtype_id(DType t) { return t == DType::f32 ? XVK_DTYPE_F32 : t == DType::f16 ? XVK_DTYPE_F16 : XVK_DTYPE_BF16; }

// One array on the host (what the CPU reference reads or writes) and on the
// device (what the kernels read or write), stored as `dtype`.
struct Twin {
  DType dtype;
  size_t n;
  std::vector<unsigned char> host;
  void *dev = nullptr;

  Twin(DType t, size_t count) : dtype(t), n(count), host(count * dtype_size(t)) {
    REQUIRE(cudaMalloc(&dev, host.size() + 16) == cudaSuccess);
  }
  Twin(DType t, const std::vector<float> &values) : Twin(t, values.size()) {
    for (size_t i = 0; i < n; ++i) set(i, values[i]);
    REQUIRE(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Twin() { cudaFree(dev); }
  Twin(const Twin &) = delete;
  Twin &operator=(const Twin &) = delete;

  void set(size_t i, float v) {
    if (dtype == DType::f32) std::memcpy(&host[i * 4], &v, 4);
    else if (dtype == DType::f16) { const xvk::half_t h = xvk::to_half(v); std::memcpy(&host[i * 2], &h, 2); }
    else { const xvk::bfloat16_t b = xvk::to_bfloat16(v); std::memcpy(&host[i * 2], &b, 2); }
  }
  static float get(const unsigned char *p, DType t) {
    if (t == DType::f32) { float v; std::memcpy(&v, p, 4); return v; }
    if (t == DType::f16) { xvk::half_t h; std::memcpy(&h, p, 2); return xvk::to_float(h); }
    xvk::bfloat16_t b;
    std::memcpy(&b, p, 2);
    return xvk::to_float(b);
  }
  // The host copy (the CPU result, for outputs) as floats.
  std::vector<float> host_values() const {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = get(&host[i * dtype_size(dtype)], dtype);
    return v;
  }
  void poison() { REQUIRE(cudaMemset(dev, 0xff, host.size()) == cudaSuccess); }
  std::vector<float> device_values() const {
    std::vector<unsigned char> bytes(host.size());
    REQUIRE(cudaMemcpy(bytes.data(), dev, bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = get(&bytes[i * dtype_size(dtype)], dtype);
    return v;
  }
  void *h() { return host.data(); }
};

std::string describe(const gpu::Config &c) { return gpu::config_name(c) + " vec=" + std::to_string(c.vec); }

// Each configuration for the call, as the tuner would run it and capped at
// one resident block per SM (blocks then loop over rows). The quick run
// (under the sanitizers) leaves out the grids covering the rows: the same
// kernels as the resident grids, launched wider.
std::vector<gpu::Config> configs_for(gpu::OpKind op, DType t, int64_t cols, int vec) {
  std::vector<gpu::Config> out;
  for (const gpu::Config &c : gpu::candidate_configs(op, dtype_id(t), cols, vec, g_ctx.info->limits())) {
    if (c.blocks_per_sm == gpu::kGridCoversRows && kQuick) continue;
    out.push_back(c);
    if (c.blocks_per_sm == 0 && !kQuick) {
      gpu::Config capped = c;
      capped.blocks_per_sm = 1;
      out.push_back(capped);
    }
  }
  return out;
}

// Runs `launch` under each of `configs` and compares each output (a Twin
// whose host side holds the CPU result) with the reference.
template <class Launch>
void check_these_configs(const std::string &what, const std::vector<gpu::Config> &configs, double input_scale,
                         std::vector<Twin *> outputs, const std::vector<std::vector<double>> &row_floors,
                         Launch &&launch) {
  std::vector<std::vector<double>> refs, floors;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::vector<float> cpu = outputs[k]->host_values();
    refs.emplace_back(cpu.begin(), cpu.end());
    floors.push_back(agreement_floor(refs.back(), input_scale, row_floors[k]));
  }
  CHECK_MESSAGE(!configs.empty(), what << ": no configuration");
  for (const gpu::Config &c : configs) {
    const std::string label = what + " " + describe(c);
    for (Twin *o : outputs) o->poison();
    const xvk_status_t s = launch(c);
    CHECK_MESSAGE(s == XVK_SUCCESS, label << ": status " << int(s));
    if (s != XVK_SUCCESS) continue;
    CUDA_REQUIRE(cudaDeviceSynchronize());
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Comparison cmp = compare(label + " output " + std::to_string(k), outputs[k]->device_values(), refs[k],
                                     floors[k], agreement_tolerance(outputs[k]->dtype));
      CHECK_MESSAGE(cmp.ok, cmp.message());
    }
  }
}

// The same under every configuration the tuner may pick (configs_for).
template <class Launch>
void check_configs(const std::string &what, gpu::OpKind op, DType t, int64_t cols, int vec, double input_scale,
                   std::vector<Twin *> outputs, const std::vector<std::vector<double>> &row_floors, Launch &&launch) {
  check_these_configs(what, configs_for(op, t, cols, vec), input_scale, std::move(outputs), row_floors, launch);
}

// Column counts: narrow to past the widest register row; `vec` > 1 needs
// multiples of the vector, the scalar path (vec 1) gets odd ones. 760 and
// 1528 give the packs of three and six (fit_packs): 95 half vectors over 32
// lanes, 190 float ones; a block of 64 threads holding 191 half vectors or
// 382 float ones.
struct Shape {
  int64_t cols;
  int vec;  // 0: the widest vector of the dtype
};
std::vector<Shape> shapes() {
  // Still every variant quick: 12288 columns take the shared dbeta sums,
  // 7000 the 16-bit cluster lanes of 4 packs (a slice's last pack partial).
  if (kQuick) return {{96, 0}, {760, 0}, {4104, 0}, {7000, 0}, {12288, 0}, {1001, 1}};
  return {{96, 0}, {760, 0}, {1000, 0}, {1528, 0}, {4104, 0}, {7000, 0}, {12288, 0}, {24576, 0}, {1001, 1}, {5003, 1}};
}
// 300 rows (6 x 50: masks broadcast over 6, causal over 50 queries) while
// narrow, 150 wider: more than the 132 blocks of one per SM on an H100.
int64_t rows_for(int64_t cols) { return cols <= 2048 ? 300 : 150; }
constexpr int64_t kQueries = 50;

}  // namespace

TEST_CASE("softmax forward, every configuration, with and without mask and causal limit") {
  for (DType t : kAllDtypes)
    for (const Shape &sh : shapes()) {
      const int64_t cols = sh.cols, rows = rows_for(cols), n = rows * cols;
      const int vec = sh.vec ? sh.vec : int(16 / dtype_size(t));
      const std::vector<float> xv = g_rng.normal(size_t(n), 0.0, 3.0, t);
      std::vector<float> mv = g_rng.normal(size_t(kQueries * cols), 0.0, 1.0, t);
      for (size_t i = 0; i < mv.size(); i += 7) mv[i] = -INFINITY;
      Twin x(t, xv), mask(t, mv), y(t, size_t(n));
      // Unmasked calls take the lean register kernels (softmax.cu, has_mask),
      // which apply the scale as they load x: forced here at scales other
      // than 1 too, a negative one turning the order of the logits around.
      struct Flavour {
        bool log, masked;
        int causal;
        float scale;
      };
      for (const Flavour f : {Flavour{false, false, XVK_CAUSAL_NONE, 1.0f}, Flavour{true, false, XVK_CAUSAL_NONE, 1.0f},
                              Flavour{false, false, XVK_CAUSAL_NONE, 0.7f}, Flavour{true, false, XVK_CAUSAL_NONE, 1.3f},
                              Flavour{true, false, XVK_CAUSAL_NONE, -0.7f}, Flavour{false, true, XVK_CAUSAL_TOP_LEFT, 0.7f},
                              Flavour{true, true, XVK_CAUSAL_BOTTOM_RIGHT, 0.7f}}) {
        xvk_softmax_forward_args a{};
        a.rows = rows, a.cols = cols, a.dtype = dtype_id(t), a.log = f.log, a.scale = f.scale;
        a.causal = f.causal, a.causal_rows = kQueries;
        a.x = {x.h(), cols}, a.y = {y.h(), cols};
        if (f.masked) a.mask = mask.h(), a.mask_ndim = 1, a.mask_shape[0] = kQueries, a.mask_stride[0] = cols;
        REQUIRE(xvk::cpu::softmax_forward(nullptr, &a) == XVK_SUCCESS);
        a.x.data = x.dev, a.y.data = y.dev;
        if (f.masked) a.mask = mask.dev;
        const std::string what = std::string(f.log ? "log_softmax " : "softmax ") + dtype_name(t) + " " +
                                 std::to_string(rows) + "x" + std::to_string(cols) + (f.masked ? " masked" : "") +
                                 " causal " + std::to_string(f.causal) + " scale " + std::to_string(f.scale);
        check_configs(what, gpu::OpKind::kSoftmaxForward, t, cols, vec, 4.0 * 3.0, {&y}, {{}},
                      [&](const gpu::Config &c) { return gpu::softmax_forward(g_ctx, a, &c); });
      }
    }
}

TEST_CASE("softmax backward, every configuration") {
  for (DType t : kAllDtypes)
    for (const Shape &sh : shapes()) {
      const int64_t cols = sh.cols, rows = rows_for(cols), n = rows * cols;
      const int vec = sh.vec ? sh.vec : int(16 / dtype_size(t));
      for (bool log : {false, true}) {
        // y from the forward of random logits, so that it is a real softmax output.
        Twin x(t, g_rng.normal(size_t(n), 0.0, 3.0, t)), y(t, size_t(n));
        xvk_softmax_forward_args f{};
        f.rows = rows, f.cols = cols, f.dtype = dtype_id(t), f.log = log, f.scale = 1.0f;
        f.x = {x.h(), cols}, f.y = {y.h(), cols};
        REQUIRE(xvk::cpu::softmax_forward(nullptr, &f) == XVK_SUCCESS);
        const std::vector<float> yv = y.host_values(), dyv = g_rng.normal(size_t(n), 0.0, 1.0, t);
        Twin yin(t, yv), dy(t, dyv), dx(t, size_t(n));
        xvk_softmax_backward_args a{};
        a.rows = rows, a.cols = cols, a.dtype = dtype_id(t), a.log = log, a.scale = 0.7f;
        a.y = {yin.h(), cols}, a.dy = {dy.h(), cols}, a.dx = {dx.h(), cols};
        REQUIRE(xvk::cpu::softmax_backward(nullptr, &a) == XVK_SUCCESS);
        a.y.data = yin.dev, a.dy.data = dy.dev, a.dx.data = dx.dev;
        const double scale = std::max(max_finite_magnitude(yv), max_finite_magnitude(dyv));
        check_configs(std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " backward " +
                          std::to_string(rows) + "x" + std::to_string(cols),
                      gpu::OpKind::kSoftmaxBackward, t, cols, vec, scale, {&dx}, {{}},
                      [&](const gpu::Config &c) { return gpu::softmax_backward(g_ctx, a, &c); });
      }
    }
}

TEST_CASE("layer_norm and rms_norm forward and backward, every configuration") {
  for (DType t : kAllDtypes)
    for (const Shape &sh : shapes())
      for (bool rms : {false, true}) {
        const int64_t cols = sh.cols, rows = rows_for(cols), n = rows * cols;
        const int vec = sh.vec ? sh.vec : int(16 / dtype_size(t));
        // LayerNorm: affine, with an offset in the data; RMSNorm: gamma alone.
        // The forward runs once per form of gamma and beta the kernels compile
        // (norms.cu, AffineForm): LayerNorm's in x's dtype and in float32;
        // RMSNorm's zero-centered, then plain in x's dtype and in float32; and
        // with and without a residual (x + residual written), which the
        // kernels also compile apart: LayerNorm's forms with one, and once
        // without; RMSNorm's without, and once with. (The backward below
        // takes the statistics of the last form: LayerNorm's of x + residual,
        // RMSNorm's of x.)
        const std::vector<float> xv = g_rng.normal(size_t(n), rms ? 0.0 : 3.0, 1.0, t),
                                 rv = g_rng.normal(size_t(n), 0.0, 1.0, t),
                                 gv = g_rng.normal(size_t(cols), rms ? 0.0 : 1.0, 0.2, t),
                                 bv = g_rng.normal(size_t(cols), 0.0, 0.2, t),
                                 dyv = g_rng.normal(size_t(n), 0.0, 1.0, t);
        Twin x(t, xv), res(t, rv), gamma(t, gv), y(t, size_t(n)), res_out(t, size_t(n)),
            mean(DType::f32, size_t(rows)), rstd(DType::f32, size_t(rows));
        struct Params {
          bool f32, zero_centered, residual;
        };
        const std::vector<Params> forms =
            rms ? std::vector<Params>{{false, false, true}, {false, true, false}, {false, false, false}, {true, false, false}}
                : std::vector<Params>{{false, false, false}, {false, false, true}, {true, false, true}};
        const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + dtype_name(t) + " " +
                                 std::to_string(rows) + "x" + std::to_string(cols);
        for (const Params form : forms) {
          if (form.f32 && t == DType::f32) continue;  // the same form as x's dtype
          const DType pt = form.f32 ? DType::f32 : t;
          std::vector<float> gf = gv;  // gamma near 1 where it is not zero-centered
          if (rms && !form.zero_centered)
            for (float &g : gf) g += 1.0f;
          Twin gamma_f(pt, gf), beta_f(pt, bv);
          xvk_norm_forward_args a{};
          a.rows = rows, a.cols = cols, a.dtype = dtype_id(t), a.rms = rms, a.epsilon = 1e-5f;
          a.zero_centered_gamma = form.zero_centered, a.param_dtype = dtype_id(pt);
          a.x = {x.h(), cols}, a.y = {y.h(), cols}, a.gamma = gamma_f.h();
          if (form.residual) a.residual = {res.h(), cols}, a.residual_out = {res_out.h(), cols};
          if (!rms) a.beta = beta_f.h(), a.mean = static_cast<float *>(mean.h());
          a.rstd = static_cast<float *>(rstd.h());
          REQUIRE(xvk::cpu::norm_forward(nullptr, &a) == XVK_SUCCESS);
          a.x.data = x.dev, a.y.data = y.dev, a.gamma = gamma_f.dev, a.rstd = static_cast<float *>(rstd.dev);
          if (form.residual) a.residual.data = res.dev, a.residual_out.data = res_out.dev;
          if (!rms) a.beta = beta_f.dev, a.mean = static_cast<float *>(mean.dev);
          std::vector<Twin *> outs = {&y, &rstd};
          if (form.residual) outs.push_back(&res_out);
          if (!rms) outs.push_back(&mean);
          check_configs(what + " forward" + (form.f32 ? " float32 params" : "") +
                            (form.zero_centered ? " zero-centered" : "") + (form.residual ? " residual" : ""),
                        gpu::OpKind::kNormForward, t, cols, vec, 6.0, outs, std::vector<std::vector<double>>(outs.size()),
                        [&](const gpu::Config &c) { return gpu::norm_forward(g_ctx, a, &c); });
        }

        // Backward from the forward's input (x + residual for LayerNorm) and statistics, twice: as
        // frameworks call it (LayerNorm: gamma in x's dtype, dbeta wanted; RMSNorm: zero-centered
        // gamma, no dbeta), then with the other form of gamma, which the 16-bit kernels read
        // through another loop (norms.cu, AffineForm), and LayerNorm without dbeta.
        const std::vector<float> hv = rms ? xv : res_out.host_values(), rstd_v = rstd.host_values();
        Twin h(t, hv), dy(t, dyv), saved_mean(DType::f32, mean.host_values()), saved_rstd(DType::f32, rstd_v),
            dx(t, size_t(n)), dgamma(t, size_t(cols)), dbeta(t, size_t(cols));
        for (const bool usual : {true, false}) {
          const bool zero_centered = usual == rms, want_dbeta = !rms && usual;
          xvk_norm_backward_args b{};
          b.rows = rows, b.cols = cols, b.dtype = dtype_id(t), b.rms = rms, b.zero_centered_gamma = zero_centered;
          b.param_dtype = b.dparam_dtype = dtype_id(t);
          b.dy = {dy.h(), cols}, b.x = {h.h(), cols}, b.dx = {dx.h(), cols}, b.gamma = gamma.h();
          b.mean = rms ? nullptr : static_cast<const float *>(saved_mean.h());
          b.rstd = static_cast<const float *>(saved_rstd.h());
          b.dgamma = dgamma.h(), b.dbeta = want_dbeta ? dbeta.h() : nullptr;
          REQUIRE(xvk::cpu::norm_backward(nullptr, &b) == XVK_SUCCESS);
          b.dy.data = dy.dev, b.x.data = h.dev, b.dx.data = dx.dev, b.gamma = gamma.dev;
          b.mean = rms ? nullptr : static_cast<const float *>(saved_mean.dev);
          b.rstd = static_cast<const float *>(saved_rstd.dev);
          b.dgamma = dgamma.dev, b.dbeta = want_dbeta ? dbeta.dev : nullptr;
          std::vector<Twin *> bouts = {&dx, &dgamma};
          std::vector<std::vector<double>> bfloors = {norm_dx_row_floor(dyv, rstd_v, gv, zero_centered), {}};
          if (want_dbeta) bouts.push_back(&dbeta), bfloors.push_back({});
          check_configs(what + " backward" + (zero_centered ? " zero-centered" : "") + (want_dbeta ? "" : " no dbeta"),
                        gpu::OpKind::kNormBackward, t, cols, vec,
                        std::max(max_finite_magnitude(hv), max_finite_magnitude(dyv)), bouts, bfloors,
                        [&](const gpu::Config &c) { return gpu::norm_backward(g_ctx, b, &c); });
        }
      }
}

// The warp rings (Variant::kWarpRing) on enough rows that each warp takes
// several through its ring and wraps around it (above, a warp gets one row
// or none): LayerNorm with a residual and float32 parameters (the general
// form), RMSNorm zero-centred; packs of three and four, the last partial,
// and 1024 columns, which the lanes' packs cover exactly (the kFull loop).
TEST_CASE("layer_norm and rms_norm forward through the warp rings, warps looping over rows") {
  const int64_t rows = 3 * int64_t(g_ctx.info->sm_count) * 16 + 7;  // 16 warps per SM at the most
  for (DType t : kAllDtypes)
    for (const int64_t cols : {int64_t(760), int64_t(1000), int64_t(1024)})
      for (bool rms : {false, true}) {
        if (kQuick && cols == 1000) continue;
        const int64_t n = rows * cols;
        const int vec = int(16 / dtype_size(t));
        std::vector<gpu::Config> rings;
        for (const gpu::Config &c : configs_for(gpu::OpKind::kNormForward, t, cols, vec))
          if (c.variant == gpu::Variant::kWarpRing) rings.push_back(c);
        if (rings.empty()) continue;  // no asynchronous copies on this device, or a row too wide for a warp
        const std::vector<float> xv = g_rng.normal(size_t(n), rms ? 0.0 : 3.0, 1.0, t),
                                 rv = g_rng.normal(size_t(n), 0.0, 1.0, t),
                                 gv = g_rng.normal(size_t(cols), rms ? 0.0 : 1.0, 0.2, DType::f32),
                                 bv = g_rng.normal(size_t(cols), 0.0, 0.2, DType::f32);
        Twin x(t, xv), res(t, rv), gamma(DType::f32, gv), beta(DType::f32, bv), y(t, size_t(n)), res_out(t, size_t(n)),
            mean(DType::f32, size_t(rows)), rstd(DType::f32, size_t(rows));
        xvk_norm_forward_args a{};
        a.rows = rows, a.cols = cols, a.dtype = dtype_id(t), a.rms = rms, a.epsilon = 1e-5f;
        a.zero_centered_gamma = rms, a.param_dtype = XVK_DTYPE_F32;
        a.x = {x.h(), cols}, a.y = {y.h(), cols}, a.gamma = gamma.h(), a.rstd = static_cast<float *>(rstd.h());
        if (!rms) {
          a.residual = {res.h(), cols}, a.residual_out = {res_out.h(), cols};
          a.beta = beta.h(), a.mean = static_cast<float *>(mean.h());
        }
        REQUIRE(xvk::cpu::norm_forward(nullptr, &a) == XVK_SUCCESS);
        a.x.data = x.dev, a.y.data = y.dev, a.gamma = gamma.dev, a.rstd = static_cast<float *>(rstd.dev);
        std::vector<Twin *> outs = {&y, &rstd};
        if (!rms) {
          a.residual.data = res.dev, a.residual_out.data = res_out.dev;
          a.beta = beta.dev, a.mean = static_cast<float *>(mean.dev);
          outs.push_back(&res_out), outs.push_back(&mean);
        }
        const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + dtype_name(t) + " " +
                                 std::to_string(rows) + "x" + std::to_string(cols) + " forward, warps looping";
        check_these_configs(what, rings, 6.0, outs, std::vector<std::vector<double>>(outs.size()),
                            [&](const gpu::Config &c) { return gpu::norm_forward(g_ctx, a, &c); });
      }
}

// LayerNorm on rows whose first value, the kernels' shift (row_shift), lies
// far from the rest: the statistics of the shifted values must still be
// exact. A variance from one pass of shifted sums, sum(h * h) - sum(h) *
// mean, misses here by more than the tolerance (the host's float32 sums show
// it below). The mean, which adds the shift back, is allowed the error of a
// float32 sum of the row's largest values: 0.05 of that value as its floor
// (the reread kernels missed a floor of 0.01 by 1.3x, at 1.4e-5 from a value
// of 50, about four of its float32 steps).
TEST_CASE("layer_norm forward, every configuration, rows whose first value is an outlier") {
  for (DType t : kAllDtypes)
    for (const int64_t cols : {int64_t(96), int64_t(760), int64_t(4104)}) {
      const int64_t rows = rows_for(cols), n = rows * cols;
      const int vec = int(16 / dtype_size(t));
      std::vector<float> xv = g_rng.normal(size_t(n), 0.0, 1.0, t);
      for (int64_t r = 0; r < rows; ++r) xv[size_t(r * cols)] = 50.0f;
      const std::vector<float> gv = g_rng.normal(size_t(cols), 1.0, 0.2, t), bv = g_rng.normal(size_t(cols), 0.0, 0.2, t);
      Twin x(t, xv), gamma(t, gv), beta(t, bv), y(t, size_t(n)), mean(DType::f32, size_t(rows)),
          rstd(DType::f32, size_t(rows));
      xvk_norm_forward_args a{};
      a.rows = rows, a.cols = cols, a.dtype = dtype_id(t), a.param_dtype = dtype_id(t), a.epsilon = 1e-5f;
      a.x = {x.h(), cols}, a.y = {y.h(), cols}, a.gamma = gamma.h(), a.beta = beta.h();
      a.mean = static_cast<float *>(mean.h()), a.rstd = static_cast<float *>(rstd.h());
      REQUIRE(xvk::cpu::norm_forward(nullptr, &a) == XVK_SUCCESS);
      // The one-pass rstd in float32, shifted by the first value as the kernels
      // shift, against the reference and the margin check_configs allows it.
      const std::vector<float> ref_rstd = rstd.host_values();
      const std::vector<double> rstd_floor = agreement_floor({ref_rstd.begin(), ref_rstd.end()}, 50.0, {});
      const Tolerance tol = agreement_tolerance(DType::f32);
      int64_t off = 0;
      for (int64_t r = 0; r < rows; ++r) {
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
          const float h = xv[size_t(r * cols + c)] - xv[size_t(r * cols)];
          s1 += h, s2 = std::fma(h, h, s2);
        }
        const float m = s1 / float(cols), one_pass = 1.0f / std::sqrt(std::fma(-s1, m, s2) / float(cols) + a.epsilon);
        const double allowed = tol.out * ref_rstd[size_t(r)] + tol.acc * rstd_floor[size_t(r)];
        if (std::fabs(one_pass - ref_rstd[size_t(r)]) > allowed) ++off;
      }
      if (cols >= 760) CHECK_MESSAGE(off > 0, "the data does not make the one-pass variance miss");
      a.x.data = x.dev, a.y.data = y.dev, a.gamma = gamma.dev, a.beta = beta.dev;
      a.mean = static_cast<float *>(mean.dev), a.rstd = static_cast<float *>(rstd.dev);
      std::vector<Twin *> outs = {&y, &rstd, &mean};
      const std::vector<double> mean_floor(size_t(rows), 0.05 * 50.0);
      check_configs(std::string("layer_norm ") + dtype_name(t) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                        " forward, first value an outlier",
                    gpu::OpKind::kNormForward, t, cols, vec, 50.0, outs, {{}, {}, mean_floor},
                    [&](const gpu::Config &c) { return gpu::norm_forward(g_ctx, a, &c); });
    }
}

int main(int argc, char **argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED test_gpu_variants: no CUDA device\n");
    return 77;
  }
  g_ctx.device = 0;
  g_ctx.info = &gpu::device_info(0);
  g_ctx.stream = nullptr;
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const int failed = context.run();
  return failed;
}
