// xvk-bench: every operator, dtype and shape through the public API on the
// CUDA backend; for each, the median of individually timed launches (device
// events, L2 flushed before each), the effective bandwidth (bytes that must
// be read once and written once, over time), and that against the copy
// ceiling: the faster of cudaMemcpy device-to-device and our own vectorized
// copy kernel on the same number of bytes, timed the same way.
//
//   xvk-bench [--quick] [--reps N] [--csv FILE] [--host-only] [--no-param-grads] [--case OP:DTYPE:ROWSxCOLS]...
//   xvk-bench --batch-norm [--quick] [--reps N] [--big-reps N] [--only OPS] [--shape NxCxHxW] [--csv FILE]
//
// --case runs only the cases named (for profiling one kernel under ncu), and
// skips the host-cost measurement. --no-param-grads runs the norm backwards
// without dgamma and dbeta (a diagnostic: what their sums cost, by difference).
// --batch-norm times BatchNorm (training forward with ReLU or Add+ReLU and
// their backward, from the ReLU mask or from y, and the inference forward) on
// the ResNet-50 shapes, channels-first and channels-last, against the bytes of
// the minimal algorithm (see bn_bytes).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "core/backend_api.h"
#include "cuda/portability.cuh"
#include "cuda/tuning/tuning.hpp"
#include "xvk/xvk.h"

namespace {

using namespace bench;

struct DType {
  const char *name;
  DLDataType dl;
  int id;  // xvk_dtype_id
  size_t size;
};
const DType kDtypes[] = {{"fp32", {kDLFloat, 32, 1}, 0, 4}, {"fp16", {kDLFloat, 16, 1}, 1, 2}, {"bf16", {kDLBfloat, 16, 1}, 2, 2}};

// A device tensor for the public API.
struct Tensor {
  Buffer buf;
  std::vector<int64_t> shape;
  DLTensor dl{};
  Tensor(std::vector<int64_t> s, const DType &t) : buf(bytes_of(s, t.size)), shape(std::move(s)) {
    dl.data = buf.p;
    dl.device = {kDLCUDA, 0};
    dl.ndim = int(shape.size());
    dl.dtype = t.dl;
    dl.shape = shape.data();
  }
  static size_t bytes_of(const std::vector<int64_t> &s, size_t es) {
    size_t n = es;
    for (int64_t d : s) n *= size_t(d);
    return n;
  }
  void fill(const DType &t, uint32_t seed, float mean, float sd) { bench::fill(buf.p, t.id, buf.bytes / t.size, seed, mean, sd); }
};

const char *kOps[] = {"softmax_fwd",    "softmax_bwd",    "log_softmax_fwd", "log_softmax_bwd",
                      "layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd",    "rms_norm_bwd"};

struct Case {
  std::string op;
  const DType *dtype;
  int64_t rows, cols;
};

struct Result {
  double us, bytes, ceiling_us;
  std::string variant;
};

// Device 0's facts as the CUDA module reads them (DeviceInfo: this benchmark
// does not link the kernels), read once: its architecture, peak memory
// bandwidth and so its tuning table.
struct BenchDevice {
  cudaDeviceProp prop;
  char arch[16];
  int memory_gbps;
  const xvk::gpu::TuningTable *table;
};
const BenchDevice &bench_device() {
  static const BenchDevice d = [] {
    BenchDevice d{};
    CUDA_OK(cudaGetDeviceProperties(&d.prop, 0));
    std::snprintf(d.arch, sizeof d.arch, "sm_%d%d", d.prop.major, d.prop.minor);
    int clock_khz = 0, bus_bits = 0;
    CUDA_OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0));
    CUDA_OK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    d.memory_gbps = xvk::gpu::peak_memory_gbps(clock_khz, bus_bits);
    d.table = &xvk::gpu::tuning_table_for(d.arch, d.memory_gbps);
    return d;
  }();
  return d;
}

// What the tuning table picks for a contiguous case on this device.
std::string chosen_variant(const std::string &op, const DType &t, int64_t rows, int64_t cols) {
  using namespace xvk::gpu;
  const cudaDeviceProp &prop = bench_device().prop;
  const OpKind kind = op.find("softmax") != std::string::npos
                          ? (op.find("bwd") != std::string::npos ? OpKind::kSoftmaxBackward : OpKind::kSoftmaxForward)
                          : (op.find("bwd") != std::string::npos ? OpKind::kNormBackward : OpKind::kNormForward);
  const int vec = cols % int64_t(16 / t.size) == 0 ? int(16 / t.size) : 1;
  const Flavour flavour = flavour_of(op.rfind("log_", 0) == 0 || op.rfind("rms_", 0) == 0);
  // Clusters as DeviceInfo::clusters has them on this benchmark's sm_90 builds.
  const Config c = choose_config(*bench_device().table, kind, flavour, t.id, rows, cols, vec,
                                 DeviceLimits{prop.warpSize, int(prop.sharedMemPerBlockOptin), prop.major >= 9, prop.major >= 8});
  return config_name(c);
}

bool g_no_param_grads = false;  // --no-param-grads

Result run_case(xvk_context *ctx, const Case &c) {
  const DType &t = *c.dtype;
  const std::vector<int64_t> shape = {c.rows, c.cols}, vshape = {c.cols}, sshape = {c.rows};
  const double n = double(c.rows) * double(c.cols), es = double(t.size);
  const bool log = c.op.rfind("log_", 0) == 0, rms = c.op.rfind("rms", 0) == 0;
  Tensor x(shape, t), y(shape, t), dy(shape, t), dx(shape, t), gamma(vshape, t), beta(vshape, t), dgamma(vshape, t),
      dbeta(vshape, t);
  const DType f32 = kDtypes[0];
  Tensor mean(sshape, f32), rstd(sshape, f32);
  x.fill(t, 1, 0.5f, 2.0f);
  dy.fill(t, 2, 0.0f, 1.0f);
  gamma.fill(t, 3, 1.0f, 0.1f);
  beta.fill(t, 4, 0.0f, 0.1f);
  Result r{};
  std::function<void()> launch;
  if (c.op.find("softmax") != std::string::npos) {
    if (c.op.find("fwd") != std::string::npos) {
      launch = [&] { XVK_OK(log ? xvk_log_softmax_forward(ctx, &x.dl, nullptr, &y.dl) : xvk_softmax_forward(ctx, &x.dl, nullptr, &y.dl)); };
      r.bytes = 2 * n * es;
    } else {
      XVK_OK(log ? xvk_log_softmax_forward(ctx, &x.dl, nullptr, &y.dl) : xvk_softmax_forward(ctx, &x.dl, nullptr, &y.dl));
      launch = [&] {
        XVK_OK(log ? xvk_log_softmax_backward(ctx, &y.dl, &dy.dl, nullptr, &dx.dl) : xvk_softmax_backward(ctx, &y.dl, &dy.dl, nullptr, &dx.dl));
      };
      r.bytes = 3 * n * es;
    }
  } else if (!rms) {
    if (c.op.find("fwd") != std::string::npos) {
      launch = [&] { XVK_OK(xvk_layer_norm_forward(ctx, &x.dl, &gamma.dl, &beta.dl, nullptr, &y.dl, &mean.dl, &rstd.dl)); };
      r.bytes = 2 * n * es + 2 * double(c.cols) * es + 2 * double(c.rows) * 4;
    } else {
      XVK_OK(xvk_layer_norm_forward(ctx, &x.dl, &gamma.dl, &beta.dl, nullptr, &y.dl, &mean.dl, &rstd.dl));
      launch = [&] {
        XVK_OK(xvk_layer_norm_backward(ctx, &dy.dl, &x.dl, &gamma.dl, &mean.dl, &rstd.dl, nullptr, &dx.dl,
                                       g_no_param_grads ? nullptr : &dgamma.dl, g_no_param_grads ? nullptr : &dbeta.dl));
      };
      r.bytes = 3 * n * es + 3 * double(c.cols) * es + 2 * double(c.rows) * 4;
    }
  } else {
    if (c.op.find("fwd") != std::string::npos) {
      launch = [&] { XVK_OK(xvk_rms_norm_forward(ctx, &x.dl, &gamma.dl, nullptr, &y.dl, &rstd.dl)); };
      r.bytes = 2 * n * es + double(c.cols) * es + double(c.rows) * 4;
    } else {
      XVK_OK(xvk_rms_norm_forward(ctx, &x.dl, &gamma.dl, nullptr, &y.dl, &rstd.dl));
      launch = [&] {
        XVK_OK(xvk_rms_norm_backward(ctx, &dy.dl, &x.dl, &gamma.dl, &rstd.dl, nullptr, &dx.dl, g_no_param_grads ? nullptr : &dgamma.dl));
      };
      r.bytes = 3 * n * es + 2 * double(c.cols) * es + double(c.rows) * 4;
    }
  }
  r.us = time_us(launch);
  r.ceiling_us = copy_ceiling(size_t(r.bytes)).best();
  r.variant = chosen_variant(c.op, t, c.rows, c.cols);
  return r;
}

// The floor under any operator's host cost: launching an empty kernel, with
// <<<>>> and the way the library launches (by handle, portability.cuh).
__global__ void empty_kernel(xvk_softmax_forward_args) {}

// Host cost per call on a 1 x 32 tensor: 10,000 calls in batches of 100,
// synchronizing between batches so the launch queue never fills (a full
// queue makes the host wait for the GPU, which would time the GPU instead);
// only the time spent inside the calls is counted. The ops take turns, 5
// rounds of 2,000 calls each, and each reports the median of its rounds. Run
// one after the other, the first (the floor) once measured 8% above the
// operators that add work to it (H200 host, 2026-11-25); taking turns
// removes any effect of the order.
void host_cost(xvk_context *ctx) {
  const DType &t = kDtypes[1];
  Tensor x({1, 32}, t), y({1, 32}, t), gamma({32}, t), beta({32}, t);
  x.fill(t, 5, 0, 1);
  gamma.fill(t, 6, 1, 0.1f);
  beta.fill(t, 7, 0, 0.1f);
  xvk_softmax_forward_args same_size_args{};  // a parameter block as large as softmax's
  void *params[] = {&same_size_args};
  xvk::gpu::KernelHandle handle;
  CUDA_OK(xvk::gpu::find_kernel_handle(&handle, reinterpret_cast<const void *>(empty_kernel)));
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  const bool overlap = major >= 9;  // as the library launches on this device (given sm_90 code)
  struct Op {
    const char *name;
    std::function<void()> call;
    std::vector<double> wall, cpu;  // us per call, one per round
  } ops[] = {{"empty kernel, <<<>>>", [&] { empty_kernel<<<1, 32, 0, g_stream>>>(same_size_args); }, {}, {}},
             {"empty kernel, handle",
              [&] { CUDA_OK(xvk::gpu::launch_by_handle(handle, dim3(1), dim3(32), 0, g_stream, params, overlap)); }, {}, {}},
             {"softmax_fwd", [&] { xvk_softmax_forward(ctx, &x.dl, nullptr, &y.dl); }, {}, {}},
             {"layer_norm_fwd", [&] { xvk_layer_norm_forward(ctx, &x.dl, &gamma.dl, &beta.dl, nullptr, &y.dl, nullptr, nullptr); }, {}, {}}};
  constexpr int kRounds = 5, kBatches = 20, kCalls = 100;
  std::printf("\nHost cost per call (10,000 calls on 1 x 32 fp16, in batches of 100 between synchronizations;\n"
              "the ops take turns over %d rounds, median of the rounds):\n", kRounds);
  for (Op &op : ops) {
    for (int i = 0; i < 1000; ++i) op.call();
    CUDA_OK(cudaStreamSynchronize(g_stream));
  }
  for (int round = 0; round < kRounds; ++round)
    for (Op &op : ops) {
      double wall = 0, cpu = 0;
      for (int batch = 0; batch < kBatches; ++batch) {
        timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        const auto w0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i) op.call();
        const auto w1 = std::chrono::steady_clock::now();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        CUDA_OK(cudaStreamSynchronize(g_stream));
        wall += std::chrono::duration<double, std::micro>(w1 - w0).count();
        cpu += ((c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec)) / 1e3;
      }
      op.wall.push_back(wall / (kBatches * kCalls));
      op.cpu.push_back(cpu / (kBatches * kCalls));
    }
  for (const Op &op : ops) {
    const auto [lo, hi] = std::minmax_element(op.wall.begin(), op.wall.end());
    std::printf("  %-22s %.2f us/call wall, %.2f us/call thread CPU time (rounds %.2f-%.2f us wall)\n", op.name,
                median(op.wall), median(op.cpu), *lo, *hi);
  }
}


// ---------------------------------------------------------------------------
// BatchNorm (--batch-norm): the ResNet-50 shapes, channels-first and
// channels-last, training forward and backward with fused ReLU and Add+ReLU,
// and the inference forward, through the public API only.

struct BnShape {
  int64_t n, c, h, w;
  double numel() const { return double(n) * double(c) * double(h) * double(w); }
};
const BnShape kBnShapes[] = {{256, 64, 112, 112}, {256, 256, 56, 56}, {256, 512, 28, 28},
                             {256, 1024, 14, 14}, {256, 2048, 7, 7},  {16, 32, 112, 112}};
const BnShape kBnQuickShapes[] = {{256, 2048, 7, 7}, {16, 32, 112, 112}};
const char *kBnOps[] = {"bn_relu_fwd",     "bn_relu_bwd",     "bn_relu_bwd_y",
                        "bn_add_relu_fwd", "bn_add_relu_bwd", "bn_relu_infer"};
const char *kBnLayouts[] = {"nchw", "nhwc"};
// Shapes with at least this many elements run --big-reps launches.
constexpr double kBnBigNumel = 1e8;
constexpr int kBnMinReps = 20;

// Bytes the minimal algorithm moves (n elements of es bytes, c channels):
// the training forward reads x twice (statistics pass, normalize pass) and z
// once, and writes y and the 1-bit mask; the backward reads x, dy and the mask
// (or y) twice (reduction pass, dx pass) and writes dx (and dz); the inference
// forward reads x once and writes y. Per-channel fp32 vectors are counted too
// (forward: gamma, beta read, running mean and var read and written, saved mean
// and rstd written; backward: gamma and the saved statistics read, dgamma and
// dbeta written; inference: gamma, beta and the running statistics read).
double bn_bytes(const std::string &op, double n, double es, double c) {
  const double mask = std::ceil(n / 32) * 4;
  if (op == "bn_relu_fwd") return 3 * n * es + mask + 32 * c;
  if (op == "bn_add_relu_fwd") return 4 * n * es + mask + 32 * c;
  if (op == "bn_relu_bwd") return 5 * n * es + 2 * mask + 20 * c;
  if (op == "bn_add_relu_bwd") return 6 * n * es + 2 * mask + 20 * c;
  if (op == "bn_relu_bwd_y") return 7 * n * es + 20 * c;
  if (op == "bn_relu_infer") return 2 * n * es + 16 * c;
  std::fprintf(stderr, "unknown BatchNorm op %s\n", op.c_str());
  std::exit(2);
}

void print_bn_byte_model() {
  std::printf(
      "\nBatchNorm bytes are those of the MINIMAL algorithm (n elements of es bytes; mask = n/8 bytes, 1 bit per element;\n"
      "the per-channel fp32 vectors are counted too, but are negligible):\n"
      "  bn_relu_fwd      training fwd, ReLU, writes mask: reads x twice (stats + normalize), writes y + mask = 3n*es + n/8\n"
      "  bn_add_relu_fwd  training fwd, Add+ReLU, mask:    reads x twice, z once, writes y + mask          = 4n*es + n/8\n"
      "  bn_relu_bwd      bwd from the mask: reads x, dy, mask twice each, writes dx (+ dgamma, dbeta)   = 5n*es + n/4\n"
      "  bn_add_relu_bwd  bwd from the mask: reads x, dy, mask twice each, writes dx and dz             = 6n*es + n/4\n"
      "  bn_relu_bwd_y    bwd reading y instead of the mask: reads x, dy, y twice each, writes dx        = 7n*es\n"
      "  bn_relu_infer    inference fwd, ReLU, no mask: reads x once, writes y                          = 2n*es\n"
      "GB/s = those bytes / time; ceiling = the copy time of the same bytes (bytes/2 read + bytes/2 written; the faster of\n"
      "cudaMemcpy D2D and our 16-byte copy kernel) / time; x copy = time / that copy time. Activations: dtype as listed;\n"
      "gamma, beta, running and saved statistics: fp32. nchw = contiguous (N, C, H, W); nhwc = PyTorch channels_last\n"
      "strides on the (N, C, H, W) shape.\n");
}

// The tensors of one BatchNorm case: views over the buffers of the shape
// (allocated once per shape, at 4 bytes an element, and reused for every
// dtype and layout). Built in place; never copied (the DLTensors point into it).
struct BnTensors {
  int64_t shape[4], strides[4], cshape[1], mshape[1];
  DLTensor x{}, z{}, y{}, dy{}, dx{}, dz{}, mask{};
  DLTensor gamma{}, beta{}, rmean{}, rvar{}, smean{}, srstd{}, dgamma{}, dbeta{};
  BnTensors(const BnTensors &) = delete;
  BnTensors() = default;
};

DLTensor bn_dl(void *p, DLDataType t, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor d{};
  d.data = p;
  d.device = {kDLCUDA, 0};
  d.ndim = ndim;
  d.dtype = t;
  d.shape = shape;
  d.strides = strides;
  return d;
}

struct BnBuffers {
  std::vector<std::unique_ptr<Buffer>> act, chan;
  std::unique_ptr<Buffer> mask;
  int64_t words = 0;
};

void bn_views(BnTensors &t, BnBuffers &b, const BnShape &s, const DType &dt, bool nhwc) {
  t.shape[0] = s.n, t.shape[1] = s.c, t.shape[2] = s.h, t.shape[3] = s.w;
  if (nhwc)  // channels_last strides of the (N, C, H, W) shape
    t.strides[0] = s.h * s.w * s.c, t.strides[1] = 1, t.strides[2] = s.w * s.c, t.strides[3] = s.c;
  else
    t.strides[0] = s.c * s.h * s.w, t.strides[1] = s.h * s.w, t.strides[2] = s.w, t.strides[3] = 1;
  t.cshape[0] = s.c;
  t.mshape[0] = b.words;
  DLTensor *act[] = {&t.x, &t.z, &t.y, &t.dy, &t.dx, &t.dz};
  for (int i = 0; i < 6; ++i) *act[i] = bn_dl(b.act[i]->p, dt.dl, 4, t.shape, t.strides);
  t.mask = bn_dl(b.mask->p, DLDataType{kDLUInt, 32, 1}, 1, t.mshape, nullptr);
  DLTensor *chan[] = {&t.gamma, &t.beta, &t.rmean, &t.rvar, &t.smean, &t.srstd, &t.dgamma, &t.dbeta};
  for (int i = 0; i < 8; ++i) *chan[i] = bn_dl(b.chan[i]->p, kDtypes[0].dl, 1, t.cshape, nullptr);
}

struct BnResult {
  std::string op, layout, status = "ok";
  const DType *dtype = nullptr;
  BnShape shape{};
  int reps = 0;
  double us = 0, bytes = 0;
  Ceiling ceiling{};
  bool ok() const { return status == "ok"; }
};

std::string bn_error(xvk_status_t s) {
  std::string m = std::string(xvk_status_string(s)) + ": " + xvk_last_error_message();
  for (char &ch : m)
    if (ch == ',' || ch == '\n' || ch == '"') ch = ch == ',' ? ';' : ' ';  // one CSV field
  return m;
}

// Times one call: checked once (a failure is reported, not fatal), then the
// median of g_reps L2-flushed launches.
void bn_time(BnResult &r, const std::function<xvk_status_t()> &call) {
  const xvk_status_t first = call();
  if (first != XVK_SUCCESS) {
    r.status = bn_error(first);
    return;
  }
  CUDA_OK(cudaStreamSynchronize(g_stream));
  xvk_status_t failed = XVK_SUCCESS;
  r.us = time_us([&] {
    const xvk_status_t s = call();
    if (s != XVK_SUCCESS && failed == XVK_SUCCESS) failed = s;
  });
  if (failed != XVK_SUCCESS) r.status = bn_error(failed);
}

// Every BatchNorm case of one shape; results in order.
void bn_run_shape(xvk_context *ctx, const BnShape &s, const std::vector<std::string> &ops, std::vector<BnResult> &out,
                  FILE *csv) {
  const size_t numel = size_t(s.n) * size_t(s.c) * size_t(s.h) * size_t(s.w);
  BnBuffers b;
  DLTensor probe{};
  int64_t pshape[4] = {s.n, s.c, s.h, s.w};
  probe.ndim = 4;
  probe.shape = pshape;
  probe.dtype = kDtypes[0].dl;
  probe.device = {kDLCUDA, 0};
  XVK_OK(xvk_batch_norm_mask_words(&probe, &b.words));
  for (int i = 0; i < 6; ++i) b.act.emplace_back(new Buffer(numel * 4));
  for (int i = 0; i < 8; ++i) b.chan.emplace_back(new Buffer(size_t(s.c) * 4));
  b.mask.reset(new Buffer(size_t(b.words) * 4));
  for (const char *layout : kBnLayouts) {
    const bool nhwc = !std::strcmp(layout, "nhwc");
    for (const DType *dt : {&kDtypes[1], &kDtypes[2], &kDtypes[0]}) {  // fp16, bf16, fp32
      BnTensors t;
      bn_views(t, b, s, *dt, nhwc);
      fill(t.x.data, dt->id, numel, 11, 0.5f, 2.0f);
      fill(t.z.data, dt->id, numel, 12, 0.0f, 1.0f);
      fill(t.dy.data, dt->id, numel, 13, 0.0f, 1.0f);
      fill(t.gamma.data, 0, size_t(s.c), 14, 1.0f, 0.1f);
      fill(t.beta.data, 0, size_t(s.c), 15, 0.0f, 0.1f);
      fill(t.rmean.data, 0, size_t(s.c), 16, 0.0f, 0.0f);
      fill(t.rvar.data, 0, size_t(s.c), 17, 1.0f, 0.0f);
      CUDA_OK(cudaStreamSynchronize(g_stream));
      xvk_batch_norm_options opt = XVK_BATCH_NORM_OPTIONS_INIT;
      opt.activation = XVK_ACTIVATION_RELU;
      auto fwd = [&](bool add) {
        return xvk_batch_norm_forward_training(ctx, &t.x, add ? &t.z : nullptr, &t.gamma, &t.beta, &opt, &t.y, &t.mask,
                                               &t.rmean, &t.rvar, &t.smean, &t.srstd);
      };
      auto bwd = [&](bool add, bool from_y) {
        return xvk_batch_norm_backward(ctx, &t.dy, &t.x, from_y ? nullptr : &t.mask, from_y ? &t.y : nullptr, &t.gamma,
                                       &t.smean, &t.srstd, &opt, &t.dx, add ? &t.dz : nullptr, &t.dgamma, &t.dbeta);
      };
      // Which forward the mask, y and saved statistics now come from: 0 none, 1 ReLU, 2 Add+ReLU.
      int fwd_state = 0;
      std::string fwd_error;
      auto ensure_fwd = [&](int want) -> bool {
        if (fwd_state == want) return true;
        const xvk_status_t st = fwd(want == 2);
        if (st != XVK_SUCCESS) {
          fwd_error = "forward failed: " + bn_error(st);
          fwd_state = 0;
          return false;
        }
        fwd_state = want;
        return true;
      };
      for (const std::string &op : ops) {
        BnResult r;
        r.op = op, r.layout = layout, r.dtype = dt, r.shape = s, r.reps = g_reps;
        r.bytes = bn_bytes(op, double(numel), double(dt->size), double(s.c));
        if (op == "bn_relu_fwd") {
          bn_time(r, [&] { return fwd(false); });
          fwd_state = r.ok() ? 1 : 0;
        } else if (op == "bn_add_relu_fwd") {
          bn_time(r, [&] { return fwd(true); });
          fwd_state = r.ok() ? 2 : 0;
        } else if (op == "bn_relu_infer") {
          bn_time(r, [&] {
            return xvk_batch_norm_forward_inference(ctx, &t.x, nullptr, &t.gamma, &t.beta, &t.rmean, &t.rvar, &opt, &t.y,
                                                    nullptr);
          });
          fwd_state = 0;  // y is overwritten
        } else {
          const bool add = op == "bn_add_relu_bwd", from_y = op == "bn_relu_bwd_y";
          if (ensure_fwd(add ? 2 : 1)) bn_time(r, [&] { return bwd(add, from_y); });
          else r.status = fwd_error;
        }
        if (r.ok()) r.ceiling = copy_ceiling(size_t(r.bytes));
        const double gbps = r.ok() ? r.bytes / r.us / 1e3 : 0;
        char shape_s[48];
        std::snprintf(shape_s, sizeof shape_s, "%lldx%lldx%lldx%lld", (long long)s.n, (long long)s.c, (long long)s.h,
                      (long long)s.w);
        if (r.ok())
          std::printf("%-16s %-4s %-5s %-16s %10.2f %8.0f %7.1f%% %7.3f %5d\n", op.c_str(), layout, dt->name, shape_s,
                      r.us, gbps, 100.0 * r.ceiling.best() / r.us, r.us / r.ceiling.best(), r.reps);
        else
          std::printf("%-16s %-4s %-5s %-16s  FAILED: %s\n", op.c_str(), layout, dt->name, shape_s, r.status.c_str());
        std::fprintf(csv, "%s,%s,%s,%lld,%lld,%lld,%lld,%d,%s,%.3f,%.0f,%.1f,%.3f,%.3f,%.4f,%.4f\n", op.c_str(), layout,
                     dt->name, (long long)s.n, (long long)s.c, (long long)s.h, (long long)s.w, r.reps, r.status.c_str(),
                     r.us, r.bytes, gbps, r.ceiling.memcpy_us, r.ceiling.kernel_us,
                     r.ok() ? r.ceiling.best() / r.us : 0.0, r.ok() ? r.us / r.ceiling.best() : 0.0);
        std::fflush(stdout);
        std::fflush(csv);
        out.push_back(r);
      }
    }
  }
}

int bn_main(xvk_context *ctx, bool quick, int big_reps, const std::string &only, const std::vector<BnShape> &chosen,
            const char *csv_path) {
  if (g_reps < kBnMinReps || big_reps < kBnMinReps) {
    std::printf("note: BatchNorm cases run at least %d launches each; raising --reps/--big-reps to %d\n", kBnMinReps,
                kBnMinReps);
    g_reps = std::max(g_reps, kBnMinReps);
    big_reps = std::max(big_reps, kBnMinReps);
  }
  const int reps = g_reps;
  std::vector<std::string> ops;
  for (const char *op : kBnOps)
    if (only.empty() || ("," + only + ",").find(std::string(",") + op + ",") != std::string::npos) ops.push_back(op);
  if (ops.empty()) {
    std::fprintf(stderr, "--only %s names no BatchNorm op\n", only.c_str());
    return 2;
  }
  std::vector<BnShape> shapes = !chosen.empty() ? chosen : quick ? std::vector<BnShape>(std::begin(kBnQuickShapes), std::end(kBnQuickShapes))
                                      : std::vector<BnShape>(std::begin(kBnShapes), std::end(kBnShapes));
  print_bn_byte_model();
  if (big_reps != reps)
    std::printf("reps: the median of %d individually timed launches per case; %d for shapes of >= %.0fM elements "
                "(the largest: to keep the run short)\n",
                reps, big_reps, kBnBigNumel / 1e6);
  else
    std::printf("reps: the median of %d individually timed launches per case (every shape)\n", reps);
  FILE *csv = std::fopen(csv_path, "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", csv_path);
    return 2;
  }
  std::fprintf(csv, "op,layout,dtype,n,c,h,w,reps,status,xvk_us,bytes,gbps,copy_memcpy_us,copy_kernel_us,"
                    "fraction_of_ceiling,x_copy_time\n");
  std::printf("\n%-16s %-4s %-5s %-16s %10s %8s %8s %7s %5s\n", "op", "lay", "dtype", "shape (NCHW)", "time(us)", "GB/s",
              "ceiling", "x copy", "reps");
  std::vector<BnResult> results;
  for (const BnShape &s : shapes) {
    g_reps = s.numel() >= kBnBigNumel ? big_reps : reps;
    bn_run_shape(ctx, s, ops, results, csv);
  }
  g_reps = reps;
  std::fclose(csv);
  // Geometric mean of "x copy" per op, over the cases that ran.
  std::printf("\nx copy time, geometric mean over shapes, layouts and dtypes:\n");
  int failures = 0;
  for (const std::string &op : ops) {
    double log_sum = 0;
    int count = 0;
    for (const BnResult &r : results)
      if (r.op == op) {
        if (r.ok()) log_sum += std::log(r.us / r.ceiling.best()), ++count;
        else ++failures;
      }
    if (count) std::printf("  %-16s %6.3f  (%d cases)\n", op.c_str(), std::exp(log_sum / count), count);
    else std::printf("  %-16s    n/a  (no case ran)\n", op.c_str());
  }
  if (failures) std::printf("%d case(s) FAILED (see above; status column of the CSV)\n", failures);
  std::printf("\nwrote %s\n", csv_path);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  bool quick = false, host_only = false, batch_norm = false;
  int big_reps = -1;
  std::string only;
  std::vector<BnShape> bn_shapes;
  std::vector<Case> chosen_cases;
  const char *csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--host-only")) host_only = true;
    else if (!std::strcmp(argv[i], "--no-param-grads")) g_no_param_grads = true;
    else if (!std::strcmp(argv[i], "--batch-norm")) batch_norm = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = parse_reps("--reps", argv[++i]);
    else if (!std::strcmp(argv[i], "--big-reps") && i + 1 < argc) big_reps = parse_reps("--big-reps", argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      BnShape b{};
      long long n = 0, c = 0, h = 0, w = 0;
      int used = 0;  // characters parsed: anything after the fourth size is an error too
      if (std::sscanf(argv[++i], "%lldx%lldx%lldx%lld%n", &n, &c, &h, &w, &used) != 4 || argv[i][used] != '\0' ||
          n < 1 || c < 1 || h < 1 || w < 1) {
        std::fprintf(stderr, "--shape wants NxCxHxW, got %s\n", argv[i]);
        return 2;
      }
      b.n = n, b.c = c, b.h = h, b.w = w;
      bn_shapes.push_back(b);
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      char op[32] = "", dtype[8] = "";
      long long rows = 0, cols = 0;
      int used = 0;
      const char *arg = argv[++i];
      const bool parsed = std::sscanf(arg, "%31[a-z_]:%7[a-z0-9]:%lldx%lld%n", op, dtype, &rows, &cols, &used) == 4 &&
                          arg[used] == '\0' && rows > 0 && cols > 0;
      const char *const *known_op = std::find_if(std::begin(kOps), std::end(kOps), [&](const char *o) { return !std::strcmp(o, op); });
      const DType *known_dtype = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DType &t) { return !std::strcmp(t.name, dtype); });
      if (!parsed || known_op == std::end(kOps) || known_dtype == std::end(kDtypes)) {
        std::fprintf(stderr, "--case wants OP:DTYPE:ROWSxCOLS (say softmax_fwd:fp16:49152x1024), got %s\n", arg);
        return 2;
      }
      chosen_cases.push_back({*known_op, known_dtype, rows, cols});
    } else {
      std::fprintf(stderr,
                   "usage: xvk-bench [--quick] [--reps N] [--csv FILE] [--host-only] [--no-param-grads] [--case OP:DTYPE:ROWSxCOLS]...\n"
                   "       xvk-bench --batch-norm [--quick] [--reps N] [--big-reps N] [--only OP[,OP...]] [--shape NxCxHxW]...\n"
                   "                [--csv FILE]\n"
                   "  --batch-norm  the BatchNorm cases instead of softmax and the norms (CSV: xvk-bn-bench.csv)\n"
                   "  --big-reps N  launches per case for shapes of >= 100M elements (default: --reps; at least 20)\n"
                   "  --only        BatchNorm ops to run, of bn_relu_fwd, bn_relu_bwd, bn_relu_bwd_y, bn_add_relu_fwd,\n"
                   "                bn_add_relu_bwd, bn_relu_infer (the backward ones run their forward untimed first)\n"
                   "  --shape       a BatchNorm shape to run instead of the list (repeatable; for profiling one case)\n"
                   "  --case        a softmax/norm case to run instead of the list, skipping the host cost (repeatable)\n"
                   "  --no-param-grads  the norm backwards without dgamma and dbeta (their cost, by difference)\n");
      return 2;
    }
  }
  if (!csv_path) csv_path = batch_norm ? "xvk-bn-bench.csv" : "xvk-bench.csv";
  if (big_reps < 0) big_reps = g_reps;
  int available = 0;
  const char *reason = "";
  xvk_backend_query(XVK_BACKEND_CUDA, &available, nullptr, &reason);
  if (!available) {
    std::printf("xvk-bench needs the CUDA backend: %s\n", reason);
    return 1;
  }
  const BenchDevice &dev = bench_device();
  const cudaDeviceProp &prop = dev.prop;
  std::printf("device: %s (%s, %d SMs, %.0f MB L2, %d GB/s peak memory bandwidth; tuning table %s: %s)\n", prop.name, dev.arch,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, dev.memory_gbps, xvk::gpu::tuning_table_key(*dev.table),
              dev.table->name);
  bench::init();
  xvk_context *ctx = nullptr;
  XVK_OK(xvk_context_create(XVK_BACKEND_CUDA, 0, &ctx));
  XVK_OK(xvk_context_set_stream(ctx, g_stream));
  if (batch_norm) {
    const int rc = bn_main(ctx, quick, big_reps, only, bn_shapes, csv_path);
    XVK_OK(xvk_context_destroy(ctx));
    return rc;
  }
  if (chosen_cases.empty()) host_cost(ctx);
  if (host_only) return 0;

  std::vector<Case> cases = chosen_cases;
  const std::vector<int64_t> sweep = quick ? std::vector<int64_t>{32, 256, 1024, 4096, 32768}
                                           : std::vector<int64_t>{32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384, 32768};
  const std::vector<int64_t> transformer = quick ? std::vector<int64_t>{768} : std::vector<int64_t>{768, 1024, 4096, 5120, 8192};
  if (cases.empty())
    for (const char *op : kOps)
      for (const DType &t : kDtypes) {
        for (int64_t cols : sweep) cases.push_back({op, &t, 49152, cols});
        for (int64_t cols : transformer) cases.push_back({op, &t, 8192, cols});
      }
  FILE *csv = std::fopen(csv_path, "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", csv_path);
    return 2;
  }
  std::fprintf(csv, "op,dtype,rows,cols,variant,xvk_us,bytes,gbps,copy_memcpy_us,copy_kernel_us,fraction_of_ceiling,x_copy_time\n");
  std::printf("\n%-16s %-5s %6s %6s %-22s %10s %8s %8s %7s\n", "op", "dtype", "rows", "cols", "variant", "time(us)", "GB/s",
              "ceiling", "x copy");
  for (const Case &c : cases) {
    const Result r = run_case(ctx, c);
    const Ceiling ceil = copy_ceiling(size_t(r.bytes));
    const double gbps = r.bytes / r.us / 1e3;
    std::printf("%-16s %-5s %6lld %6lld %-22s %10.2f %8.0f %7.1f%% %7.3f\n", c.op.c_str(), c.dtype->name, (long long)c.rows,
                (long long)c.cols, r.variant.c_str(), r.us, gbps, 100.0 * r.ceiling_us / r.us, r.us / r.ceiling_us);
    std::fprintf(csv, "%s,%s,%lld,%lld,%s,%.3f,%.0f,%.1f,%.3f,%.3f,%.4f,%.4f\n", c.op.c_str(), c.dtype->name,
                 (long long)c.rows, (long long)c.cols, r.variant.c_str(), r.us, r.bytes, gbps, ceil.memcpy_us, ceil.kernel_us,
                 r.ceiling_us / r.us, r.us / r.ceiling_us);
    std::fflush(stdout);
  }
  std::fclose(csv);
  XVK_OK(xvk_context_destroy(ctx));
  std::printf("\nwrote %s\n", csv_path);
  return 0;
}
