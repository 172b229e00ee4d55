// sm_90 BatchNorm tuning: the activation size up to which the training
// forward runs as one cooperative kernel (x read once, kept in shared memory)
// rather than two passes, per memory order and element width. Set from `xvk-bench --batch-norm`
// with XVK_BATCH_NORM_SINGLE_PASS=0 and =1 (see bench/results/); the kernel
// also has to fit, which batch_norm.cu checks.
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

extern const BatchNormTuning kBatchNormSm90;
// History, channels-first: on an H100 80GB HBM3 (tree d811455,
// bench/results/h100-2026-11-23-batch-norm-two-pass-stats.txt) one pass won
// on NCHW 16x32x112x112 (bn+relu fp16 35.6 -> 25.4 us). On an H200 the
// two-pass kernels then caught up (tree of 77bfe9f: bn+relu fp16 24.86 ->
// 23.65 us one pass, but bn+add+relu 27.97 -> 28.58).
// Then (H200, 2026-11-25, sources 03f2806d68bdf1e1, each variant three times
// alternated, best; bench/results/h200-2026-11-25-batch-norm-single-pass-off.txt),
// (16, 32, 112, 112), two passes / one pass, us:
//   NCHW bn+relu      fp16 22.5 / 23.5   bf16 22.2 / 23.2   fp32 32.0 / 30.2
//   NCHW bn+add+relu  fp16 25.7 / 27.7   bf16 25.5 / 27.7   fp32 38.2 / 38.8
//   NHWC bn+relu      fp16 29.7 / 29.8   bf16 29.8 / 30.1   fp32 40.4 / 34.7
//   NHWC bn+add+relu  fp16 33.7 / 35.1   bf16 33.7 / 35.1   fp32 46.9 / 43.8
// Now, with the channels-last single pass taking its statistics from the
// registers it loads the tile through (H200, 2026-11-26, same method):
//   NCHW bn+relu      fp16 22.5 / 23.1   bf16 22.2 / 23.2   fp32 31.9 / 30.0
//   NCHW bn+add+relu  fp16 25.6 / 28.3   bf16 25.5 / 27.7   fp32 38.3 / 38.7
//   NHWC bn+relu      fp16 29.8 / 27.9   bf16 29.7 / 28.4   fp32 40.6 / 32.7
//   NHWC bn+add+relu  fp16 33.7 / 33.6   bf16 33.6 / 33.3   fp32 46.8 / 42.0
// Then, with the grid's merges shortened (a warp per channel in phase 1, one
// round of loads per merge, finish's inputs loaded before the barrier) and
// finalize's loads batched (H200, 2026-11-26, sources 05296b4dc77eaa4a, best
// of two):
//   NCHW bn+relu      fp16 22.1 / 22.3   bf16 22.0 / 22.4   fp32 31.5 / 29.5
//   NCHW bn+add+relu  fp16 25.3 / 27.4   bf16 25.0 / 27.4   fp32 37.8 / 38.8
//   NHWC bn+relu      fp16 28.7 / 25.7   bf16 28.5 / 25.5   fp32 39.2 / 31.6
//   NHWC bn+add+relu  fp16 32.7 / 30.8   bf16 32.5 / 31.1   fp32 45.5 / 40.2
// So: one pass wherever it fits channels-last; channels-first in fp32 only
// (bn+relu 6% faster, bn+add+relu 1-3% slower), two passes in 16-bit.
constexpr int64_t kFits = int64_t(28) << 20;  // the tile fits: 132 SMs x 227 KB is 29.3 MiB
const BatchNormTuning kBatchNormSm90 = {
    {{0, kFits}, {kFits, kFits}},
    "H200: one pass where it fits, except channels-first 16-bit (two passes measured faster there)"};

}  // namespace xvk::gpu
