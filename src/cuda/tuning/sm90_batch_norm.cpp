// sm_90 BatchNorm tuning: the activation size up to which the training
// forward runs as one cooperative kernel (x read once, kept in shared memory)
// rather than two passes. Set from `xvk-bench --batch-norm` on the H100 (see
// bench/results/); the kernel also has to fit, which batch_norm.cu checks.
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

extern const BatchNormTuning kBatchNormSm90;
const BatchNormTuning kBatchNormSm90 = {int64_t(28) << 20, "placeholder until measured"};

}  // namespace xvk::gpu
