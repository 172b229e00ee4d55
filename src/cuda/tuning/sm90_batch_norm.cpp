// sm_90 BatchNorm tuning: the activation size up to which the training
// forward runs as one cooperative kernel (x read once, kept in shared memory)
// rather than two passes. Set from `xvk-bench --batch-norm` on the H100 (see
// bench/results/); the kernel also has to fit, which batch_norm.cu checks.
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

extern const BatchNormTuning kBatchNormSm90;
// Measured on an H100 80GB HBM3 (`run_on_gpu.sh bnsinglepass`, tree d811455,
// bench/results/h100-2026-11-23-batch-norm-two-pass-stats.txt): NCHW
// 16x32x112x112 bn+relu forward, two passes against one, fp16 35.6 -> 25.4
// us, bf16 32.5 -> 25.1 us, fp32 44.7 -> 34.5 us (add+relu: 39.9 -> 32.1,
// 36.4 -> 31.7, 52.7 -> 46.4); 256x2048x7x7 does not qualify (planes of 49:
// not whole mask words) and is unchanged. One pass wins wherever it fits, so
// the limit is about what fits: 132 SMs x 227 KB of shared memory is 29.3 MiB.
// On an H200 after the two-pass kernels got faster (tree of 77bfe9f,
// `run_on_gpu.sh bnsinglepass`), one pass against two on that case: bn+relu
// fp16 24.86 -> 23.65 us, bf16 23.94 -> 23.10, fp32 34.94 -> 30.69; but
// bn+add+relu fp16 27.97 -> 28.58, bf16 27.04 -> 27.94 (slower), fp32
// 40.77 -> 39.68. The limit is kept; this table cannot tell the two apart.
const BatchNormTuning kBatchNormSm90 = {int64_t(28) << 20, "H100: one pass wherever the tile fits in shared memory"};

}  // namespace xvk::gpu
