// The shape of the AMD tuning tables while no AMD GPU has been available to
// tune on: the default rule's structure (tuning/tuning.cpp), written out per
// operator and dtype, with block sizes chosen per wave width. Each table file
// (cdna_wave64.cpp, rdna_wave32.cpp) says which sizes it picks and why. When
// xvk-tune runs on AMD hardware, its output replaces a table file wholesale.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu::untuned {

struct BlockSizes {
  int group_threads;   // kGroup: threads per block
  int block_threads;   // kBlock: threads per block at the widest row of a band
  int reread_threads;  // kReread: threads per block
};

// Backward register kernels hold four arrays per element (dy, x-hat and the
// dgamma/dbeta sums); with 64 elements per lane (8 vectors of 16-bit values)
// they spill on every AMD target: to scratch on gfx1030, into AGPRs on gfx908
// and gfx90a (src/hip/DISASSEMBLY.md, resources). The tables stop at 32 and
// let wider rows take the re-read variant.
inline constexpr int kMaxBackwardElems = 32;

// Bands per (operator, dtype): 8 group bands, at most 4 + 1 block bands, and
// the reread band.
inline constexpr int kMaxBandsPerCase = 14;
inline constexpr int kCases = 4 * 3;  // OpKind x xvk_dtype_id

struct Table {
  std::array<TuningEntry, kCases * kMaxBandsPerCase> entries{};
  int count = 0;
};

// Rows are keyed by columns; the bands below are in vectors of 16 bytes
// (4 float32 or 8 float16/bfloat16), the unit the kernels work in, since
// tables serve the vector path only.
constexpr Table make_table(BlockSizes s) {
  Table t;
  for (int op = 0; op < 4; ++op) {
    const bool backward = is_backward(OpKind(op));
    for (int dtype = 0; dtype < 3; ++dtype) {
      const int vec = dtype == 0 ? 4 : 8;
      // Fields by name, so that a field added to TuningEntry cannot shift them.
      auto add = [&](int64_t max_vectors, Variant v, int group, int rows, int packs, int threads) {
        TuningEntry e{};
        e.op = op;
        e.flavour = int(Flavour::kAny);  // nothing measured to tell the two apart
        e.dtype = dtype;
        e.max_rows = INT64_MAX;  // one row bucket: no measurements to split rows by
        e.max_cols = max_vectors * vec;
        e.variant = int(v);
        e.group = group;
        e.rows = rows;
        e.packs = packs;
        e.threads = threads;
        e.blocks_per_sm = 0;  // as many blocks as fit
        t.entries[std::size_t(t.count++)] = e;
      };
      // A group of up to 32 lanes per row, two rows per group when a row is
      // at most 8 vectors (more loads in flight per lane); then a group of 32
      // with 2 or 4 vectors per lane.
      for (int g = 1; g <= 32; g *= 2) add(g, Variant::kGroup, g, g <= 8 ? 2 : 1, 1, s.group_threads);
      add(64, Variant::kGroup, 32, 1, 1, s.group_threads);
      add(128, Variant::kGroup, 32, 1, 1, s.group_threads);
      // A block per row: the fewest vectors per lane (packs) that keep the
      // block at block_threads, as long as the kernel's launch bound (its
      // register budget) allows that many threads, and at most
      // kMaxBackwardElems elements per lane in the backward kernels.
      const int max_packs = backward ? kMaxBackwardElems / vec : kMaxBlockPacks;
      int64_t covered = 128;
      for (int packs = 1; packs <= max_packs; packs *= 2) {
        const int64_t upto = int64_t(packs) * s.block_threads;
        if (upto <= covered || s.block_threads > register_kernel_max_threads(backward, packs * vec)) continue;
        add(upto, Variant::kBlock, 0, 1, packs, 0);
        covered = upto;
      }
      // Wider rows: the most packs, with the block growing up to the bound.
      const int bound = register_kernel_max_threads(backward, max_packs * vec);
      if (int64_t(max_packs) * bound > covered) add(int64_t(max_packs) * bound, Variant::kBlock, 0, 1, max_packs, 0);
      // Rows too wide for registers are streamed twice.
      add(int64_t(1) << 40, Variant::kReread, 0, 1, 1, s.reread_threads);
    }
  }
  return t;
}

}  // namespace xvk::gpu::untuned
