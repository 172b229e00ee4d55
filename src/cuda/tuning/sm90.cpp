// sm_90 tuning table: not tuned yet (no rows), so every call takes the default rule.
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

extern const TuningTable kTuningSm90;
const TuningTable kTuningSm90 = {"sm_90: not tuned yet (default rule)", nullptr, 0};

}  // namespace xvk::gpu
