// Tuning table for AMD CDNA GPUs, wave64: gfx908 (MI100), gfx90a (MI200),
// gfx940 (MI300 series). UNTUNED: no AMD GPU was reachable when it was
// written, so these are defaults chosen from the hardware's structure, not
// from measurements. Replace this file with xvk-tune's output from a real
// CDNA GPU (naming the GPU and the date, as src/cuda/tuning/sm90.cpp does).
//
// Why these sizes:
//  - A CDNA compute unit has four SIMDs and runs each wavefront of 64 lanes
//    on one of them. A block of 256 threads is four wavefronts, one per SIMD,
//    so even a single resident block keeps every SIMD of its CU busy; the
//    default rule's 128 threads (two wavefronts) would leave two SIMDs to
//    other blocks. Hence 256 threads for the group variants.
//  - A group of 32 lanes is half a wavefront here: two rows per wavefront,
//    reduced by width-32 shuffles that never cross the half (common.cuh).
//  - Block variant: the row is spread over at most 256 threads (four
//    wavefronts) with more vectors per lane, so the cross-wavefront step of
//    each reduction goes through LDS for four partials and a barrier of four
//    wavefronts. The launch bound of those kernels (tuning.hpp) caps their
//    registers; where the bound allows fewer than 256 threads the default
//    rule decides.
//  - Rows too wide for registers: 512 threads (eight wavefronts), the default
//    rule's choice, streaming the row twice through the 8 MB L2 (gfx90a).
#include "hip/tuning/untuned_rules.hpp"

namespace xvk::gpu {
namespace {

constexpr untuned::Table kTable = untuned::make_table({/*group_threads=*/256, /*block_threads=*/256,
                                                      /*reread_threads=*/512});

}  // namespace

extern const TuningTable kTuningCdnaWave64;
const TuningTable kTuningCdnaWave64 = {"CDNA wave64 (gfx908/gfx90a/gfx940): untuned defaults", kTable.entries.data(),
                                       kTable.count, nullptr};

}  // namespace xvk::gpu
