// Tuning table for AMD RDNA 2 GPUs, wave32: gfx1030 (Navi 21). UNTUNED: no
// AMD GPU was reachable when it was written, so these are defaults chosen
// from the hardware's structure, not from measurements. Replace this file
// with xvk-tune's output from a real RDNA GPU (naming the GPU and the date).
//
// Why these sizes:
//  - HIP compiles gfx1030 for wavefronts of 32 lanes, the width of an NVIDIA
//    warp, so the group variants work exactly as on NVIDIA: a group of 32 is a
//    whole wavefront and the per-warp arithmetic is the CUDA build's.
//  - A work-group processor (WGP) has four SIMD32 units and, in the default
//    WGP mode, spreads a block over all four. 128 threads is four wavefronts,
//    one per SIMD32; it is also what the tuned sm_90 table chose for most
//    narrow rows of the forward operators on the same width. Hence 128
//    threads for the group variants and as the block variant's target.
//  - Block variant: at most 128 threads (four wavefronts) per row, with more
//    vectors per lane as rows grow (the tuned sm_90 table also prefers 64 to
//    256 threads with 2 to 8 vectors per lane over one vector per lane on
//    1K to 8K columns); beyond that the block grows up to the launch bound.
//  - Rows too wide for registers: 512 threads (sixteen wavefronts), the
//    default rule's choice.
#include "hip/tuning/untuned_rules.hpp"

namespace xvk::gpu {
namespace {

constexpr untuned::Table kTable = untuned::make_table({/*group_threads=*/128, /*block_threads=*/128,
                                                      /*reread_threads=*/512});

}  // namespace

extern const TuningTable kTuningRdnaWave32;
const TuningTable kTuningRdnaWave32 = {"RDNA wave32 (gfx1030): untuned defaults", kTable.entries.data(), kTable.count,
                                         nullptr};

}  // namespace xvk::gpu
