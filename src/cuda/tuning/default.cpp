// The conservative default for architectures without a tuned table (sm_80
// and anything else): no rows, so every call takes default_config's rule.
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

extern const TuningTable kTuningDefault;
const TuningTable kTuningDefault = {"default rule (untuned)", nullptr, 0, nullptr};

}  // namespace xvk::gpu
