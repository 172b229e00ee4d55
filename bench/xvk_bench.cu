// xvk-bench: every operator, dtype and shape through the public API on the
// CUDA backend; for each, the median of individually timed launches (device
// events, L2 flushed before each), the effective bandwidth (bytes that must
// be read once and written once, over time), and that against the copy
// ceiling: the faster of cudaMemcpy device-to-device and our own vectorized
// copy kernel on the same number of bytes, timed the same way.
//
//   xvk-bench [--quick] [--reps N] [--csv FILE] [--host-only]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "core/backend_api.h"
#include "cuda/tuning/tuning.hpp"
#include "xvk/xvk.h"

namespace {

using namespace bench;

// The copy ceiling for `bytes` moved (half read, half written), cached per size.
struct Ceiling {
  double memcpy_us, kernel_us;
  double best() const { return std::min(memcpy_us, kernel_us); }
};
Ceiling copy_ceiling(size_t bytes) {
  static std::map<size_t, Ceiling> cache;
  auto it = cache.find(bytes);
  if (it != cache.end()) return it->second;
  const size_t half = (bytes / 2 + 15) / 16 * 16;
  Buffer src(half), dst(half);
  CUDA_OK(cudaMemsetAsync(src.p, 1, half, g_stream));
  Ceiling c;
  c.memcpy_us = time_us([&] { CUDA_OK(cudaMemcpyAsync(dst.p, src.p, half, cudaMemcpyDeviceToDevice, g_stream)); });
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t n = half / 16;
  const int blocks = int(std::min<size_t>((n + 255) / 256, size_t(sms) * 8));
  c.kernel_us = time_us([&] {
    copy_kernel<<<blocks, 256, 0, g_stream>>>(static_cast<const uint4 *>(src.p), static_cast<uint4 *>(dst.p), n);
  });
  cache[bytes] = c;
  return c;
}

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

const char *variant_name(xvk::gpu::Variant v) {
  return v == xvk::gpu::Variant::kGroup ? "group" : v == xvk::gpu::Variant::kBlock ? "block" : "reread";
}

// What the tuning table picks for a contiguous case on this device.
std::string chosen_variant(const std::string &op, const DType &t, int64_t rows, int64_t cols) {
  using namespace xvk::gpu;
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  char arch[16];
  std::snprintf(arch, sizeof arch, "sm_%d%d", prop.major, prop.minor);
  const OpKind kind = op.find("softmax") != std::string::npos
                          ? (op.find("bwd") != std::string::npos ? OpKind::kSoftmaxBackward : OpKind::kSoftmaxForward)
                          : (op.find("bwd") != std::string::npos ? OpKind::kNormBackward : OpKind::kNormForward);
  const int vec = cols % int64_t(16 / t.size) == 0 ? int(16 / t.size) : 1;
  const Config c = choose_config(tuning_table_for(arch), kind, t.id, rows, cols, vec, prop.warpSize);
  char s[64];
  if (c.variant == Variant::kGroup)
    std::snprintf(s, sizeof s, "group%d.p%d.r%d.t%d", c.group, c.packs, c.rows, c.threads);
  else
    std::snprintf(s, sizeof s, "%s.p%d.t%d", variant_name(c.variant), c.packs, c.threads);
  if (c.blocks_per_sm) std::snprintf(s + std::strlen(s), sizeof s - std::strlen(s), ".b%d", c.blocks_per_sm);
  return s;
}

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
        XVK_OK(xvk_layer_norm_backward(ctx, &dy.dl, &x.dl, &gamma.dl, &mean.dl, &rstd.dl, nullptr, &dx.dl, &dgamma.dl, &dbeta.dl));
      };
      r.bytes = 3 * n * es + 3 * double(c.cols) * es + 2 * double(c.rows) * 4;
    }
  } else {
    if (c.op.find("fwd") != std::string::npos) {
      launch = [&] { XVK_OK(xvk_rms_norm_forward(ctx, &x.dl, &gamma.dl, nullptr, &y.dl, &rstd.dl)); };
      r.bytes = 2 * n * es + double(c.cols) * es + double(c.rows) * 4;
    } else {
      XVK_OK(xvk_rms_norm_forward(ctx, &x.dl, &gamma.dl, nullptr, &y.dl, &rstd.dl));
      launch = [&] { XVK_OK(xvk_rms_norm_backward(ctx, &dy.dl, &x.dl, &gamma.dl, &rstd.dl, nullptr, &dx.dl, &dgamma.dl)); };
      r.bytes = 3 * n * es + 2 * double(c.cols) * es + double(c.rows) * 4;
    }
  }
  r.us = time_us(launch);
  r.ceiling_us = copy_ceiling(size_t(r.bytes)).best();
  r.variant = chosen_variant(c.op, t, c.rows, c.cols);
  return r;
}

// The floor under any operator's host cost: launching an empty kernel.
__global__ void empty_kernel(xvk_softmax_forward_args) {}

// Host cost per call on a 1 x 32 tensor: 10,000 calls in batches of 100,
// synchronizing between batches so the launch queue never fills (a full
// queue makes the host wait for the GPU, which would time the GPU instead);
// only the time spent inside the calls is counted.
void host_cost(xvk_context *ctx) {
  const DType &t = kDtypes[1];
  Tensor x({1, 32}, t), y({1, 32}, t), gamma({32}, t), beta({32}, t);
  x.fill(t, 5, 0, 1);
  gamma.fill(t, 6, 1, 0.1f);
  beta.fill(t, 7, 0, 0.1f);
  const xvk_softmax_forward_args same_size_args{};  // a parameter block as large as softmax's
  struct Op {
    const char *name;
    std::function<void()> call;
  } ops[] = {{"empty kernel (floor)", [&] { empty_kernel<<<1, 32, 0, g_stream>>>(same_size_args); }},
             {"softmax_fwd", [&] { xvk_softmax_forward(ctx, &x.dl, nullptr, &y.dl); }},
             {"layer_norm_fwd", [&] { xvk_layer_norm_forward(ctx, &x.dl, &gamma.dl, &beta.dl, nullptr, &y.dl, nullptr, nullptr); }}};
  std::printf("\nHost cost per call (10,000 calls on 1 x 32 fp16, in batches of 100 between synchronizations):\n");
  for (const Op &op : ops) {
    for (int i = 0; i < 1000; ++i) op.call();
    CUDA_OK(cudaStreamSynchronize(g_stream));
    double wall = 0, cpu = 0;
    for (int batch = 0; batch < 100; ++batch) {
      timespec c0, c1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      const auto w0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 100; ++i) op.call();
      const auto w1 = std::chrono::steady_clock::now();
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      CUDA_OK(cudaStreamSynchronize(g_stream));
      wall += std::chrono::duration<double, std::micro>(w1 - w0).count();
      cpu += ((c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec)) / 1e3;
    }
    std::printf("  %-22s %.2f us/call wall, %.2f us/call thread CPU time\n", op.name, wall / 1e4, cpu / 1e4);
  }
}

}  // namespace

int main(int argc, char **argv) {
  bool quick = false, host_only = false;
  const char *csv_path = "xvk-bench.csv";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--host-only")) host_only = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: xvk-bench [--quick] [--reps N] [--csv FILE] [--host-only]\n");
      return 2;
    }
  }
  int available = 0;
  const char *reason = "";
  xvk_backend_query(XVK_BACKEND_CUDA, &available, nullptr, &reason);
  if (!available) {
    std::printf("xvk-bench needs the CUDA backend: %s\n", reason);
    return 1;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, %.0f MB L2)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6);
  bench::init();
  xvk_context *ctx = nullptr;
  XVK_OK(xvk_context_create(XVK_BACKEND_CUDA, 0, &ctx));
  XVK_OK(xvk_context_set_stream(ctx, g_stream));
  host_cost(ctx);
  if (host_only) return 0;

  std::vector<Case> cases;
  const std::vector<int64_t> sweep = quick ? std::vector<int64_t>{32, 256, 1024, 4096, 32768}
                                           : std::vector<int64_t>{32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384, 32768};
  const std::vector<int64_t> transformer = quick ? std::vector<int64_t>{768} : std::vector<int64_t>{768, 1024, 4096, 5120, 8192};
  for (const char *op : kOps)
    for (const DType &t : kDtypes) {
      for (int64_t cols : sweep) cases.push_back({op, &t, 49152, cols});
      for (int64_t cols : transformer) cases.push_back({op, &t, 8192, cols});
    }
  FILE *csv = std::fopen(csv_path, "w");
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
