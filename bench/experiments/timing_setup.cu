// Why did the benchmark time some cases slower than the tuner (softmax
// forward fp32 8192 x 1024: 31.3 us in xvk-bench's table, 26.98 us in the
// tuning table's comment)? Part 1 times the same kernels the tuner's way and
// the benchmark's way (buffers sized for 49152 x 32768 fp32, GBs apart, or a
// buffer of exactly each tensor's size; 15 launches after 3 ms of warm-up or
// 50 after 20 ms) beside the copy kernel on the same buffers. Part 2 times
// one small case round after round (20 launches a round; the last six
// rounds 15 ms apart) after each of:
// nothing; a large case's buffers allocated (cudaMalloc), filled and freed; a large copy
// running for 300 ms on buffers kept; both. Each round also reports the SM
// clock, from a kernel that spins for a known number of cycles against
// %globaltimer. Built with xvk-tune (bench/CMakeLists.txt) as
// xvk-timing-setup.
#include <chrono>
#include <cstdio>
#include <memory>

#include "kernel_context.cuh"

using namespace bench;
using namespace xvk::gpu;

namespace {

struct Shape {
  const char *op;  // "softmax" or "layer_norm"
  int dtype;       // xvk_dtype_id
  int64_t rows, cols;
};

// The table's configuration of `s`, with x and y at the given addresses.
std::function<void()> op_launch(Context &ctx, const Shape &s, void *x, void *y, float *mean, float *rstd, void *gamma,
                                void *beta) {
  if (s.op[0] == 's') {
    xvk_softmax_forward_args a{};
    a.rows = s.rows, a.cols = s.cols, a.dtype = s.dtype, a.scale = 1.0f, a.x = {x, s.cols}, a.y = {y, s.cols};
    return [&ctx, a] {
      if (softmax_forward(ctx, a, nullptr) != XVK_SUCCESS) std::fprintf(stderr, "softmax_forward failed\n"), std::exit(2);
    };
  }
  xvk_norm_forward_args a{};
  a.rows = s.rows, a.cols = s.cols, a.dtype = s.dtype, a.epsilon = 1e-5f, a.x = {x, s.cols}, a.y = {y, s.cols};
  a.gamma = gamma, a.beta = beta, a.param_dtype = s.dtype, a.mean = mean, a.rstd = rstd;
  return [&ctx, a] {
    if (norm_forward(ctx, a, nullptr) != XVK_SUCCESS) std::fprintf(stderr, "norm_forward failed\n"), std::exit(2);
  };
}

// Memory straight from the driver (bench::Buffer's never goes back to it).
struct DriverBuffer {
  void *p = nullptr;
  explicit DriverBuffer(size_t bytes) { CUDA_OK(cudaMalloc(&p, bytes)); }
  ~DriverBuffer() { CUDA_OK(cudaFree(p)); }
  DriverBuffer(const DriverBuffer &) = delete;
};

// One thread spins for `cycles` SM clocks and reports the nanoseconds they took.
__global__ void spin(long long cycles, unsigned long long *ns) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  while (clock64() - c0 < cycles) {
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  *ns = t1 - t0;
}

// The SM clock in MHz, measured now.
double sm_clock_mhz(unsigned long long *d_ns) {
  const long long cycles = 200000;
  spin<<<1, 1, 0, g_stream>>>(cycles, d_ns);
  unsigned long long ns = 0;
  CUDA_OK(cudaMemcpyAsync(&ns, d_ns, sizeof ns, cudaMemcpyDeviceToHost, g_stream));
  CUDA_OK(cudaStreamSynchronize(g_stream));
  return cycles * 1e3 / double(ns);
}

}  // namespace

int main() {
  g_arena_bytes = size_t(40) << 30;  // leaves room for part 2's 4 x 6.4 GB from the driver
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  Context ctx;
  init_kernel_context(ctx);
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t big = size_t(49152) * 32768 * 4;  // the tuner's buffers, and the largest case's tensors
  Buffer params(4 * 32768 * 4), stats(2 * 49152 * 4), ns(8);
  fill(params.p, 0, 4 * 32768, 3, 1.0f, 0.1f);
  void *gamma = params.p, *beta = static_cast<char *>(params.p) + 32768 * 4;
  float *mean = static_cast<float *>(stats.p), *rstd = mean + 49152;
  auto *d_ns = static_cast<unsigned long long *>(ns.p);

  std::printf("\nPart 1: the same kernels timed the tuner's and the benchmark's way (better of two, alternated)\n");
  const Shape shapes[] = {{"softmax", 0, 8192, 1024}, {"softmax", 1, 8192, 768}, {"layer_norm", 1, 8192, 768},
                          {"softmax", 0, 49152, 1024}};
  for (const Shape &s : shapes) {
    const size_t es = s.dtype == 0 ? 4 : 2, bytes = size_t(s.rows * s.cols) * es;
    for (int tuner_buffers = 0; tuner_buffers < 2; ++tuner_buffers) {
      std::unique_ptr<Buffer> x(new Buffer(tuner_buffers ? big : bytes));
      std::unique_ptr<Buffer> y(new Buffer(tuner_buffers ? big : bytes));
      fill(x->p, s.dtype, bytes / es, 11, 0.5f, 2.0f);
      const auto op = op_launch(ctx, s, x->p, y->p, mean, rstd, gamma, beta);
      const auto copy = [&] { launch_copy_kernel(x->p, y->p, bytes / 16); };
      for (int tuner_reps = 0; tuner_reps < 2; ++tuner_reps) {
        g_reps = tuner_reps ? 15 : 50;
        g_warm_up_ms = tuner_reps ? 3.0 : 20.0;
        double op_us = 1e30, copy_us = 1e30;
        for (int round = 0; round < 2; ++round) {
          op_us = std::min(op_us, time_us(op));
          copy_us = std::min(copy_us, time_us(copy));
        }
        std::printf("%-10s %s %6lld x %5lld  buffers %-6s launches %-9s  op %8.2f us  copy kernel %8.2f us  op/copy %.3f\n",
                    s.op, s.dtype == 0 ? "fp32" : "fp16", (long long)s.rows, (long long)s.cols,
                    tuner_buffers ? "tuner" : "bench", tuner_reps ? "15/3ms" : "50/20ms", op_us, copy_us, op_us / copy_us);
        std::fflush(stdout);
      }
    }
  }

  std::printf("\nPart 2: softmax forward fp32 8192 x 1024 (fresh buffers of its size) and the copy kernel on the same\n"
              "bytes, 20 launches a round (median), after each preparation\n");
  const Shape small{"softmax", 0, 8192, 1024};
  const size_t small_bytes = size_t(small.rows * small.cols) * 4;
  g_reps = 20;
  g_warm_up_ms = 0.0;  // one launch
  std::unique_ptr<Buffer> kept_src(new Buffer(big / 2)), kept_dst(new Buffer(big / 2));
  const char *preps[] = {"nothing", "alloc+fill+free 4 x 6.4 GB", "copy 3.2 GB for 300 ms (buffers kept)",
                         "alloc+fill 4 x 6.4 GB, copy for 300 ms, free"};
  for (int prep = 0; prep < 4; ++prep) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      CUDA_OK(cudaDeviceSynchronize());
      const auto quiet_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (std::chrono::steady_clock::now() < quiet_until) {
      }
      const bool allocate = prep == 1 || prep == 3, heavy = prep == 2 || prep == 3;
      std::vector<std::unique_ptr<DriverBuffer>> large;
      if (allocate)
        for (int i = 0; i < 4; ++i) {
          large.emplace_back(new DriverBuffer(big));
          fill(large.back()->p, 0, big / 4, 20 + i, 0.0f, 1.0f);
        }
      if (heavy) {
        void *src = allocate ? large[0]->p : kept_src->p, *dst = allocate ? large[1]->p : kept_dst->p;
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (std::chrono::steady_clock::now() < until) {
          launch_copy_kernel(src, dst, big / 2 / 16);
          CUDA_OK(cudaStreamSynchronize(g_stream));
        }
      }
      CUDA_OK(cudaStreamSynchronize(g_stream));
      large.clear();  // frees them
      const auto t0 = std::chrono::steady_clock::now();
      std::unique_ptr<Buffer> x(new Buffer(small_bytes)), y(new Buffer(small_bytes));
      fill(x->p, 0, small_bytes / 4, 11, 0.5f, 2.0f);
      const auto op = op_launch(ctx, small, x->p, y->p, mean, rstd, gamma, beta);
      const auto copy = [&] { launch_copy_kernel(x->p, y->p, small_bytes / 16); };
      std::printf("%s (%s):\n", preps[prep], repeat ? "again" : "first");
      for (int round = 0; round < 12; ++round) {
        if (round >= 6) {  // later rounds further apart: 15 ms idle before each
          const auto idle_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(15);
          while (std::chrono::steady_clock::now() < idle_until) {
          }
        }
        const double op_us = time_us(op), copy_us = time_us(copy), mhz = sm_clock_mhz(d_ns);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %7.1f ms after: op %7.2f us  copy kernel %7.2f us  SM clock %5.0f MHz\n", ms, op_us, copy_us, mhz);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
