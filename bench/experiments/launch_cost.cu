// What does one kernel launch cost the host, by each way of launching it?
// The issue's host-cost target is under 3 us per call, and xvk-bench's floor
// (an empty kernel launched with <<<>>>) measured 2.8-3.8 us on the H100
// machines: this times that floor against the runtime's other launch calls
// and the driver's cuLaunchKernel and cuLaunchKernelEx (plain and with the
// programmatic dependent launch attribute), with a parameter block as large as the
// softmax forward's and with an 8-byte one. Same scheme as xvk-bench's host
// cost: 10,000 calls in batches of 100 with a synchronization between
// batches (outside the timed part), the ways taking turns over 5 rounds,
// median of the rounds. Built beside xvk-tune as xvk-launch-cost.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <vector>

#include <cuda.h>

#include "bench_util.cuh"
#include "core/backend_api.h"  // xvk_softmax_forward_args, the softmax kernels' parameter block

using namespace bench;

namespace {

// The driver's cuLaunchKernel, found through the runtime (which loads the
// driver itself), so that the program starts, and rejects its arguments, on
// a machine without one.
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
#define CU_OK(call)                                                                       \
  do {                                                                                    \
    const CUresult r_ = (call);                                                           \
    if (r_ != CUDA_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #call, int(r_)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void empty_big(xvk_softmax_forward_args) {}
__global__ void empty_small(const float *) {}

struct Way {
  const char *name;
  std::function<void()> call;
  std::vector<double> wall;  // us per call, one per round
};

}  // namespace

// xvk-launch-cost takes no arguments.
int main(int argc, char **argv) {
  if (argc > 1) {
    std::fprintf(stderr, "usage: xvk-launch-cost (no arguments), got '%s'\n", argv[1]);
    return 2;
  }
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const xvk_softmax_forward_args big{};
  const float *small = nullptr;
  void *big_args[] = {const_cast<xvk_softmax_forward_args *>(&big)};
  void *small_args[] = {&small};
  CUfunction big_fn = nullptr, small_fn = nullptr;
  CUDA_OK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t *>(&big_fn), reinterpret_cast<const void *>(empty_big)));
  CUDA_OK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t *>(&small_fn), reinterpret_cast<const void *>(empty_small)));
  const CUstream stream = reinterpret_cast<CUstream>(g_stream);
  void *entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUDA_OK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !entry) {
    std::fprintf(stderr, "xvk-launch-cost: the driver has no cuLaunchKernel\n");
    return 2;
  }
  const auto cuLaunchKernel = reinterpret_cast<LaunchKernelFn>(entry);
  // cuLaunchKernelEx (CUDA 12.0), plain and with the programmatic-serialization attribute.
  void *entry_ex = nullptr;
  CUDA_OK(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry_ex, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !entry_ex) {
    std::fprintf(stderr, "xvk-launch-cost: the driver has no cuLaunchKernelEx\n");
    return 2;
  }
  using LaunchKernelExFn = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);
  const auto cuLaunchKernelEx = reinterpret_cast<LaunchKernelExFn>(entry_ex);
  CUlaunchConfig cu_cfg{};
  cu_cfg.gridDimX = cu_cfg.gridDimY = cu_cfg.gridDimZ = 1;
  cu_cfg.blockDimX = 32, cu_cfg.blockDimY = cu_cfg.blockDimZ = 1;
  cu_cfg.hStream = stream;
  CUlaunchAttribute cu_pdl{};
  cu_pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  cu_pdl.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cu_pdl_cfg = cu_cfg;
  cu_pdl_cfg.attrs = &cu_pdl, cu_pdl_cfg.numAttrs = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1), cfg.blockDim = dim3(32), cfg.stream = g_stream;
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t pdl_cfg = cfg;
  pdl_cfg.attrs = &pdl, pdl_cfg.numAttrs = 1;
  Way ways[] = {
      {"<<<>>>, softmax-sized args", [&] { empty_big<<<1, 32, 0, g_stream>>>(big); }, {}},
      {"cudaLaunchKernel, softmax-sized", [&] { CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty_big), dim3(1), dim3(32), big_args, 0, g_stream)); }, {}},
      {"cudaLaunchKernelEx, softmax-sized", [&] { CUDA_OK(cudaLaunchKernelEx(&cfg, empty_big, big)); }, {}},
      {"cudaLaunchKernelEx + PDL attribute", [&] { CUDA_OK(cudaLaunchKernelEx(&pdl_cfg, empty_big, big)); }, {}},
      {"cuLaunchKernel, softmax-sized", [&] { CU_OK(cuLaunchKernel(big_fn, 1, 1, 1, 32, 1, 1, 0, stream, big_args, nullptr)); }, {}},
      {"cuLaunchKernelEx, softmax-sized", [&] { CU_OK(cuLaunchKernelEx(&cu_cfg, big_fn, big_args, nullptr)); }, {}},
      {"cuLaunchKernelEx + PDL attribute", [&] { CU_OK(cuLaunchKernelEx(&cu_pdl_cfg, big_fn, big_args, nullptr)); }, {}},
      {"<<<>>>, 8-byte args", [&] { empty_small<<<1, 32, 0, g_stream>>>(small); }, {}},
      {"cuLaunchKernel, 8-byte args", [&] { CU_OK(cuLaunchKernel(small_fn, 1, 1, 1, 32, 1, 1, 0, stream, small_args, nullptr)); }, {}},
  };
  constexpr int kRounds = 5, kBatches = 100, kCalls = 100;
  for (Way &w : ways) {
    for (int i = 0; i < 1000; ++i) w.call();
    CUDA_OK(cudaStreamSynchronize(g_stream));
  }
  for (int round = 0; round < kRounds; ++round)
    for (Way &w : ways) {
      double wall = 0;
      for (int batch = 0; batch < kBatches; ++batch) {
        const auto w0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i) w.call();
        const auto w1 = std::chrono::steady_clock::now();
        CUDA_OK(cudaStreamSynchronize(g_stream));
        wall += std::chrono::duration<double, std::micro>(w1 - w0).count();
      }
      w.wall.push_back(wall / (kBatches * kCalls));
    }
  std::printf("%s; host cost per launch (10,000 launches of an empty 1 x 32 kernel in batches of 100, median of\n"
              "%d rounds taken in turns; softmax-sized args: a %zu-byte parameter block)\n",
              prop.name, kRounds, sizeof(xvk_softmax_forward_args));
  for (Way &w : ways) {
    std::vector<double> s = w.wall;
    std::sort(s.begin(), s.end());
    std::printf("  %-38s %5.2f us  (rounds %.2f-%.2f)\n", w.name, s[s.size() / 2], s.front(), s.back());
  }
  return 0;
}
