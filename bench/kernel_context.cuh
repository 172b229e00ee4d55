// For the programs that call the CUDA kernels' C++ entry points directly
// (xvk-tune, bench/experiments/timing_setup.cu) rather than the public API:
// a context on device 0 and bench's stream. Call bench::init() first.
#pragma once

#include "bench_util.cuh"
#include "cuda/launch.cuh"

namespace bench {

inline void init_kernel_context(xvk::gpu::Context &ctx) {
  ctx.device = 0;
  ctx.info = &xvk::gpu::device_info(0);
  ctx.stream = g_stream;
}

}  // namespace bench
