// The HIP module's tuning tables and config chooser, on the host: built with
// the hip preset only (it links the HIP build of tuning.cpp). No AMD GPU is
// needed: these check that every table row can run at the wave width of the
// architectures it serves, and that the default rule stays within the rules
// of a wave64 and a wave32 device.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/tuning/tuning.hpp"

using namespace xvk::gpu;

namespace {

struct Family {
  const char *arch;
  int wave;  // wavefront width of the target as HIP compiles it
};
// 64 KiB of LDS per workgroup on every target here (sharedMemPerBlock).
constexpr int kLdsBytes = 64 * 1024;
const Family kFamilies[] = {{"gfx908", 64}, {"gfx90a", 64}, {"gfx940", 64}, {"gfx1030", 32}};

int vec_of(int dtype) { return dtype == 0 ? 4 : 8; }  // 16 bytes of float32 or of 16-bit values

// The invariants of a config the kernels rely on at this wave width.
void check_runnable(const Config &c, OpKind op, int dtype, int64_t cols, int wave) {
  CHECK(c.threads >= wave);
  CHECK(c.threads % wave == 0);  // whole wavefronts: the block reductions assume it
  CHECK(c.threads <= kMaxThreads);
  if (c.variant == Variant::kGroup) {
    CHECK(c.group >= 1);
    CHECK(c.group <= 32);  // sub-warp groups on every vendor (half a wavefront on CDNA)
    CHECK(c.group <= wave);
    CHECK((c.group & (c.group - 1)) == 0);
    CHECK(int64_t(c.group) * c.packs * c.vec >= cols);  // the group holds the whole row
  }
  if (c.variant == Variant::kBlock) CHECK(int64_t(c.threads) * c.packs * c.vec >= cols);
  if (c.variant == Variant::kGroup || c.variant == Variant::kBlock)
    CHECK(c.threads <= register_kernel_max_threads(op, c.variant == Variant::kGroup ? c.group : 0, c.packs * c.vec * c.rows,
                                                   dtype_bytes(dtype)));
  if (c.variant == Variant::kShared) CHECK(op != OpKind::kNormBackward);
  if (c.variant == Variant::kSharedDy) CHECK(op == OpKind::kSoftmaxBackward);
  // What it keeps in shared memory (staged rows, dbeta sums) fits in the LDS.
  CHECK(config_shared_bytes(op, c, cols, dtype_bytes(dtype)) + kSharedReserve <= kLdsBytes);
}

}  // namespace

TEST_CASE("tuning_table_for maps each AMD target to its family's table") {
  const TuningTable &cdna = tuning_table_for("gfx90a");
  const TuningTable &rdna = tuning_table_for("gfx1030");
  CHECK(&tuning_table_for("gfx908") == &cdna);
  CHECK(&tuning_table_for("gfx940") == &cdna);
  CHECK(&cdna != &rdna);
  CHECK(std::string(cdna.name).find("wave64") != std::string::npos);
  CHECK(std::string(rdna.name).find("wave32") != std::string::npos);
  CHECK(std::string(cdna.name).find("untuned") != std::string::npos);
  CHECK(std::string(rdna.name).find("untuned") != std::string::npos);
  CHECK(cdna.count > 0);
  CHECK(rdna.count > 0);
  // Anything else (another AMD target, or an NVIDIA one in this build) takes the default rule.
  CHECK(tuning_table_for("gfx1100").count == 0);
  CHECK(tuning_table_for("sm_90").count == 0);
}

TEST_CASE("every row of the AMD tables is chosen, and runs, across its whole band") {
  for (const Family &f : kFamilies) {
    const TuningTable &table = tuning_table_for(f.arch);
    int64_t previous_max[4][3] = {};
    for (int i = 0; i < table.count; ++i) {
      const TuningEntry &e = table.entries[i];
      CAPTURE(f.arch);
      CAPTURE(i);
      REQUIRE(e.op >= 0);
      REQUIRE(e.op < 4);
      REQUIRE(e.dtype >= 0);
      REQUIRE(e.dtype < 3);
      const int vec = vec_of(e.dtype);
      int64_t &lo = previous_max[e.op][e.dtype];
      REQUIRE(e.max_cols > lo);  // ascending bands
      const int64_t hi = e.max_cols > (int64_t(1) << 20) ? (int64_t(1) << 20) : e.max_cols;
      for (int64_t cols : {lo + vec, hi}) {  // narrowest and widest vector-path row of the band
        CAPTURE(cols);
        const OpKind op = OpKind(e.op);
        const Config c = choose_config(table, op, Flavour(e.flavour == int(Flavour::kAny) ? 0 : e.flavour), e.dtype, 49152,
                                       cols, vec, DeviceLimits{f.wave, kLdsBytes});
        CHECK(int(c.variant) == e.variant);  // the row, not the default rule's fallback
        if (e.threads != 0) CHECK(c.threads == e.threads);
        if (e.variant == int(Variant::kBlock)) CHECK(c.packs <= e.packs);  // fewer where whole waves hold the row in fewer
        // Backward kernels with 64 elements per lane spill on AMD: the tables stay at 32.
        if (is_backward(op) && c.variant != Variant::kReread) CHECK(c.packs * c.vec * c.rows <= 32);
        check_runnable(c, op, e.dtype, cols, f.wave);
      }
      lo = e.max_cols;
    }
  }
}

TEST_CASE("the default rule keeps whole wavefronts at wave64 and wave32") {
  for (int wave : {64, 32}) {
    for (int op = 0; op < 4; ++op) {
      for (int vec : {1, 4, 8}) {
        const int dtype = vec == 4 ? 0 : 1;  // float32 on its vector path, a 16-bit type otherwise
        for (int64_t cols = 1; cols <= 65536; cols = cols < 64 ? cols + 1 : cols * 3 / 2) {
          CAPTURE(wave);
          CAPTURE(op);
          CAPTURE(vec);
          CAPTURE(cols);
          const Config c = default_config(OpKind(op), dtype, cols, vec, DeviceLimits{wave, kLdsBytes});
          check_runnable(c, OpKind(op), dtype, cols, wave);
        }
      }
    }
  }
}
