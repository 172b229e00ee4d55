// The CUDA module's tuning tables and config chooser, on the host: built
// with the cuda preset (it links the CUDA build of tuning.cpp). No GPU is
// needed: these check that every row of the sm_90 table is what a call of
// its operator, flavour and shape gets, and that it can run on an sm_90
// device, and how flavours and the covering grid are matched and refused.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/tuning/tuning.hpp"

using namespace xvk::gpu;

namespace {

// An H100 or H200: 32-lane warps, 227 KiB of shared memory per block with the
// opt-in, thread block clusters, asynchronous copies.
const DeviceLimits kSm90{32, 227 * 1024, true, true};

int vec_of(int dtype) { return dtype == 0 ? 4 : 8; }  // 16 bytes of float32 or of 16-bit values

// The row count the tuner timed a bucket at (xvk_tune.cu).
int64_t tuned_rows(int64_t max_rows) { return max_rows == 16384 ? 8192 : 49152; }

}  // namespace

TEST_CASE("an sm_90 device takes the table of its memory bandwidth") {
  REQUIRE(unsetenv("XVK_TUNING_TABLE") == 0);  // a table forced from the environment would answer instead
  const TuningTable &h100 = tuning_table_for("sm_90", 3352);   // H100 SXM: 2619 MHz x 5120 bits
  const TuningTable &h200 = tuning_table_for("sm_90", 4915);   // H200: 3200 MHz x 6144 bits
  CHECK(peak_memory_gbps(2619000, 5120) == 3352);
  CHECK(peak_memory_gbps(3200000, 6144) == 4915);
  CHECK(peak_memory_gbps(0, 5120) == 0);
  CHECK(&h100 != &h200);
  CHECK(&tuning_table_for("sm_90") == &h100);  // bandwidth unknown: the slower devices' table
  CHECK(&tuning_table_for("sm_90", 2039) == &h100);  // H100 PCIe
  CHECK(&tuning_table_for("sm_90", 4000) == &h200);
  CHECK(std::string(tuning_table_key(h100)) == "sm_90");
  CHECK(std::string(tuning_table_key(h200)) == "sm_90-h200");
  CHECK(std::string(tuning_table_symbol(h200)) == "kTuningSm90H200");
  CHECK(std::string(h100.name).find("H100") != std::string::npos);
  CHECK(std::string(h200.name).find("H200") != std::string::npos);
  // Another architecture takes the default rule's empty table, whatever its memory.
  CHECK(tuning_table_for("sm_80", 2039).count == 0);
  CHECK(std::string(tuning_table_key(tuning_table_for("sm_100", 8000))) == "default");
}

TEST_CASE("XVK_TUNING_TABLE forces a table by its key, and is ignored when it names none") {
  const TuningTable &h100 = tuning_table_for("sm_90", 3352);
  const TuningTable &h200 = tuning_table_for("sm_90", 4915);
  REQUIRE(setenv("XVK_TUNING_TABLE", "sm_90", 1) == 0);
  CHECK(&tuning_table_for("sm_90", 4915) == &h100);
  CHECK(&tuning_table_for("sm_80", 2039) == &h100);  // whatever the device; its limits still vet each row
  REQUIRE(setenv("XVK_TUNING_TABLE", "sm_90-h200", 1) == 0);
  CHECK(&tuning_table_for("sm_90", 3352) == &h200);
  REQUIRE(setenv("XVK_TUNING_TABLE", "default", 1) == 0);
  CHECK(tuning_table_for("sm_90", 4915).count == 0);
  REQUIRE(setenv("XVK_TUNING_TABLE", "sm_91", 1) == 0);
  CHECK(&tuning_table_for("sm_90", 4915) == &h200);
  REQUIRE(setenv("XVK_TUNING_TABLE", "", 1) == 0);
  CHECK(&tuning_table_for("sm_90", 3352) == &h100);
  REQUIRE(unsetenv("XVK_TUNING_TABLE") == 0);
}

namespace {

// Every row of an sm_90 table is what its operator and flavour get at its tuned width.
void check_sm90_table(const TuningTable &table) {
  REQUIRE(table.count > 0);
  CHECK(std::string(table.name).find("sm_90") == 0);
  // (op, flavour, dtype, max_rows) -> the previous row's max_cols: bands ascend.
  std::map<std::tuple<int, int, int, int64_t>, int64_t> previous;
  int covering = 0;
  for (int i = 0; i < table.count; ++i) {
    const TuningEntry &e = table.entries[i];
    CAPTURE(i);
    REQUIRE(e.op >= 0);
    REQUIRE(e.op < 4);
    // A tuned table tells the two operators of a kernel family apart.
    REQUIRE((e.flavour == int(Flavour::kPlain) || e.flavour == int(Flavour::kSecond)));
    REQUIRE(e.dtype >= 0);
    REQUIRE(e.dtype < 3);
    int64_t &lo = previous[{e.op, e.flavour, e.dtype, e.max_rows}];
    CHECK(e.max_cols > lo);
    lo = e.max_cols;
    const OpKind op = OpKind(e.op);
    if (e.blocks_per_sm == kGridCoversRows) {
      ++covering;
      CHECK(op != OpKind::kNormBackward);  // its partial sums are one per block
    }
    const Config c = choose_config(table, op, Flavour(e.flavour), e.dtype, tuned_rows(e.max_rows), e.max_cols,
                                   vec_of(e.dtype), kSm90);
    // The row itself, not the default rule's fallback.
    CHECK(int(c.variant) == e.variant);
    CHECK(c.blocks_per_sm == e.blocks_per_sm);
    if (uses_group(Variant(e.variant))) CHECK(c.group == e.group);
    if (e.threads != 0 && e.variant != int(Variant::kBlock)) CHECK(c.threads == e.threads);
    // A block's packs: the row's, at most the entry's (fewer when the threads,
    // rounded up to whole warps, hold the row in fewer: fit_packs).
    if (e.variant == int(Variant::kBlock)) CHECK(c.packs <= e.packs);
    Config again = c;
    CHECK(complete_config(again, op, e.dtype, e.max_cols, kSm90));
  }
  CHECK(covering > 0);
}

}  // namespace

TEST_CASE("every row of the sm_90 tables is what its operator and flavour get at its tuned width") {
  REQUIRE(unsetenv("XVK_TUNING_TABLE") == 0);
  SUBCASE("H100 (HBM3)") { check_sm90_table(tuning_table_for("sm_90", 3352)); }
  SUBCASE("H200 (HBM3e)") { check_sm90_table(tuning_table_for("sm_90", 4915)); }
}

TEST_CASE("the table index lists each operator and dtype's rows in table order") {
  REQUIRE(unsetenv("XVK_TUNING_TABLE") == 0);
  for (const TuningTable *table : {&tuning_table_for("sm_90", 3352), &tuning_table_for("sm_90", 4915)}) {
    const TuningIndex index(*table);
    size_t listed = 0;
    for (int op = 0; op < 4; ++op)
      for (int dtype = 0; dtype < 3; ++dtype) {
        std::vector<int> expected;
        for (int i = 0; i < table->count; ++i)
          if (table->entries[i].op == op && table->entries[i].dtype == dtype) expected.push_back(i);
        CAPTURE(op);
        CAPTURE(dtype);
        CHECK(index.rows_for(OpKind(op), dtype) == expected);
        listed += expected.size();
      }
    CHECK(listed == size_t(table->count));
    CHECK(index.rows_for(OpKind(4), 0).empty());
    CHECK(index.rows_for(OpKind::kSoftmaxForward, 3).empty());
  }
}

TEST_CASE("choose_config takes the first matching row through the index, rows of other calls between") {
  const TuningEntry entries[] = {
      // op, flavour, dtype, max_rows, max_cols, variant, group, rows, packs, threads, blocks_per_sm
      {2, int(Flavour::kPlain), 1, 16384, 1024, int(Variant::kReread), 0, 1, 1, 128, 0},
      {0, int(Flavour::kPlain), 1, 16384, 1024, int(Variant::kReread), 0, 1, 1, 512, 0},
      {2, int(Flavour::kSecond), 1, 16384, 1024, int(Variant::kReread), 0, 1, 1, 256, 0},
      {2, int(Flavour::kPlain), 0, INT64_MAX, 1024, int(Variant::kReread), 0, 1, 1, 1024, 0},
      {2, int(Flavour::kPlain), 1, INT64_MAX, 1024, int(Variant::kReread), 0, 1, 1, 64, 0},
  };
  const TuningTable table{"test", entries, 5, nullptr};
  const TuningIndex index(table);
  auto threads = [&](Flavour f, int dtype, int64_t rows) {
    return choose_config(table, index, OpKind::kNormForward, f, dtype, rows, 1024, 8, kSm90).threads;
  };
  CHECK(threads(Flavour::kPlain, 1, 8192) == 128);
  CHECK(threads(Flavour::kSecond, 1, 8192) == 256);
  CHECK(threads(Flavour::kPlain, 1, 49152) == 64);   // past the first row's max_rows
  CHECK(threads(Flavour::kPlain, 0, 8192) == 1024);
  CHECK(choose_config(table, index, OpKind::kSoftmaxForward, Flavour::kPlain, 1, 8192, 1024, 8, kSm90).threads == 512);
}

TEST_CASE("choose_config matches a row's flavour, and a kAny row serves both") {
  const TuningEntry entries[] = {
      // op, flavour, dtype, max_rows, max_cols, variant, group, rows, packs, threads, blocks_per_sm
      {0, int(Flavour::kSecond), 0, INT64_MAX, 1024, int(Variant::kBlock), 0, 1, 2, 0, kGridCoversRows},
      {0, int(Flavour::kAny), 0, INT64_MAX, 1024, int(Variant::kReread), 0, 1, 1, 256, 0},
  };
  const TuningTable table{"test", entries, 2, nullptr};
  const Config log_softmax = choose_config(table, OpKind::kSoftmaxForward, Flavour::kSecond, 0, 4096, 1024, 4, kSm90);
  CHECK(log_softmax.variant == Variant::kBlock);
  CHECK(log_softmax.blocks_per_sm == kGridCoversRows);
  const Config softmax = choose_config(table, OpKind::kSoftmaxForward, Flavour::kPlain, 0, 4096, 1024, 4, kSm90);
  CHECK(softmax.variant == Variant::kReread);
  CHECK(softmax.threads == 256);
  CHECK(softmax.blocks_per_sm == 0);
  // Another operator or dtype matches neither row: the default rule.
  const Config norm = choose_config(table, OpKind::kNormForward, Flavour::kSecond, 0, 4096, 1024, 4, kSm90);
  const Config rule = default_config(OpKind::kNormForward, 0, 1024, 4, kSm90);
  CHECK(norm.variant == rule.variant);
  CHECK(norm.packs == rule.packs);
  CHECK(norm.threads == rule.threads);
}

TEST_CASE("the grid covering the rows is a candidate for every operator but the norm backward") {
  for (int op = 0; op < 4; ++op) {
    CAPTURE(op);
    int covering = 0;
    for (const Config &c : candidate_configs(OpKind(op), 1, 4096, 8, kSm90)) covering += c.blocks_per_sm == kGridCoversRows;
    if (OpKind(op) == OpKind::kNormBackward)
      CHECK(covering == 0);
    else
      CHECK(covering > 0);
    Config c;
    c.variant = Variant::kReread;
    c.vec = 8;
    c.threads = 256;
    c.blocks_per_sm = kGridCoversRows;
    CHECK(complete_config(c, OpKind(op), 1, 4096, kSm90) == (OpKind(op) != OpKind::kNormBackward));
    c.blocks_per_sm = -2;  // no other negative value means anything
    CHECK_FALSE(complete_config(c, OpKind(op), 1, 4096, kSm90));
  }
}

TEST_CASE("config_name spells a configuration as the benchmark tables and the tuner print it") {
  Config c;
  c.variant = Variant::kGroup, c.group = 8, c.packs = 1, c.rows = 2, c.threads = 128, c.blocks_per_sm = kGridCoversRows;
  CHECK(config_name(c) == "group8.p1.r2.t128.all");
  c.blocks_per_sm = 0;
  CHECK(config_name(c) == "group8.p1.r2.t128");
  c = Config{};
  c.variant = Variant::kBlock, c.packs = 4, c.threads = 256, c.blocks_per_sm = 2;
  CHECK(config_name(c) == "block.p4.t256.b2");
  c.variant = Variant::kRereadSums, c.packs = 2, c.threads = 1024, c.blocks_per_sm = 0;
  CHECK(config_name(c) == "rereadsums.p2.t1024");
}

TEST_CASE("a cluster row splits the norm backward's row over its blocks, where the device launches clusters") {
  Config c;
  c.variant = Variant::kCluster, c.vec = 8, c.group = 8, c.threads = 512;
  // 32768 half columns: 4096 vectors, 512 per block, one per thread.
  REQUIRE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  CHECK(c.packs == 1);
  CHECK(config_name(c) == "cluster8.p1.t512");
  c.threads = 256;  // two per thread
  REQUIRE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  CHECK(c.packs == 2);
  c.threads = 128;  // four: 32 elements
  REQUIRE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  CHECK(c.packs == 4);
  c.threads = 64;  // eight: 64 elements, more than the registers hold
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  c.vec = 4, c.threads = 256;  // float32, four: 16 elements
  REQUIRE(complete_config(c, OpKind::kNormBackward, 0, 32768, kSm90));
  CHECK(c.packs == 4);
  c.vec = 8;
  c.threads = 1024;  // warps without columns
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  c.threads = 512;
  c.group = 3;  // not a power of two
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  c.group = 16;  // more than every sm_90 device runs without opting in
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 32768, kSm90));
  c.group = 8;
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 56, kSm90));  // 7 vectors: a block left without any
  for (int op = 0; op < 3; ++op) CHECK_FALSE(complete_config(c, OpKind(op), 1, 32768, kSm90));
  const DeviceLimits no_clusters{32, 227 * 1024, false};
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 32768, no_clusters));
  int with = 0, without = 0;
  for (const Config &k : candidate_configs(OpKind::kNormBackward, 1, 32768, 8, kSm90)) with += k.variant == Variant::kCluster;
  for (const Config &k : candidate_configs(OpKind::kNormBackward, 1, 32768, 8, no_clusters))
    without += k.variant == Variant::kCluster;
  CHECK(with > 0);
  CHECK(without == 0);
}

TEST_CASE("group and block rows hold the row in the fewest instantiated packs") {
  CHECK(fit_packs(1) == 1);
  CHECK(fit_packs(3) == 3);
  CHECK(fit_packs(5) == 6);
  CHECK(fit_packs(7) == 8);
  CHECK(fit_packs(9) == 0);
  Config c;
  c.variant = Variant::kGroup, c.vec = 8, c.group = 32, c.rows = 1, c.threads = 128;
  REQUIRE(complete_config(c, OpKind::kNormForward, 1, 768, kSm90));  // 96 half vectors: 3 per lane
  CHECK(c.packs == 3);
  c.vec = 4;
  REQUIRE(complete_config(c, OpKind::kNormForward, 0, 768, kSm90));  // 192 float vectors: 6 per lane
  CHECK(c.packs == 6);
  REQUIRE(complete_config(c, OpKind::kNormForward, 0, 1024, kSm90));
  CHECK(c.packs == 8);
  CHECK_FALSE(complete_config(c, OpKind::kNormForward, 0, 1028, kSm90));  // 257 vectors: more than 8 per lane
  c = Config{};
  c.variant = Variant::kBlock, c.vec = 8, c.packs = 4;
  REQUIRE(complete_config(c, OpKind::kNormForward, 1, 1536, kSm90));  // 48 lanes of 4 round up to 64 threads of 3
  CHECK(c.threads == 64);
  CHECK(c.packs == 3);
  c.packs = 5;  // not instantiated
  CHECK_FALSE(complete_config(c, OpKind::kNormForward, 1, 1536, kSm90));
  // The candidates list a block shape once, however many packs counts round to it.
  int blocks = 0, p3 = 0;
  for (const Config &k : candidate_configs(OpKind::kNormForward, 1, 1536, 8, kSm90))
    if (k.variant == Variant::kBlock && k.blocks_per_sm == 0) ++blocks, p3 += k.packs == 3 && k.threads == 64;
  CHECK(p3 == 1);
  CHECK(blocks >= 2);
}

TEST_CASE("norm backward blocks of more than 32 elements a lane keep dbeta's sums in shared memory") {
  Config c;
  c.variant = Variant::kBlock, c.vec = 8, c.packs = 8;
  // 16384 half columns: 256 lanes of 8 packs (64 elements), each with a run of 68 floats.
  REQUIRE(complete_config(c, OpKind::kNormBackward, 1, 16384, kSm90));
  CHECK(c.threads == 256);
  CHECK(c.packs == 8);
  CHECK(config_shared_bytes(OpKind::kNormBackward, c, 16384, 2) == 256 * 68 * 4);
  CHECK(config_shared_bytes(OpKind::kNormForward, c, 16384, 2) == 0);  // only the backward holds sums
  // A device whose blocks cannot have those bytes does not run it (64 KiB: the AMD LDS).
  const DeviceLimits small_shared{32, 64 * 1024, true};
  CHECK_FALSE(complete_config(c, OpKind::kNormBackward, 1, 16384, small_shared));
  CHECK(complete_config(c, OpKind::kNormForward, 1, 16384, small_shared));
  // 8192 columns in 4 packs: 32 elements, both sums in registers.
  c.packs = 4;
  REQUIRE(complete_config(c, OpKind::kNormBackward, 1, 8192, kSm90));
  CHECK(c.packs == 4);
  CHECK(config_shared_bytes(OpKind::kNormBackward, c, 8192, 2) == 0);
  CHECK(complete_config(c, OpKind::kNormBackward, 1, 8192, small_shared));
}

TEST_CASE("the sm_90 BatchNorm table picks the single pass by memory order, width, size and channels") {
  const BatchNormTuning *t = tuning_table_for("sm_90").batch_norm;
  REQUIRE(t != nullptr);
  const int64_t mib = int64_t(1) << 20;
  auto bytes_of = [](int64_t n, int64_t c, int64_t h, int64_t w, int element) { return n * c * h * w * element; };
  // Channels-last, up to 64 channels, from 6 MiB to 28 MiB (the measured wins).
  CHECK(batch_norm_single_pass_wanted(t, true, 2, bytes_of(16, 32, 112, 112, 2), 32));
  CHECK(batch_norm_single_pass_wanted(t, true, 4, bytes_of(16, 32, 112, 112, 4), 32));
  CHECK(batch_norm_single_pass_wanted(t, true, 2, bytes_of(8, 64, 112, 112, 2), 64));
  CHECK(batch_norm_single_pass_wanted(t, true, 2, 6 * mib, 64));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 2, 6 * mib - 1, 64));
  CHECK(batch_norm_single_pass_wanted(t, true, 4, 28 * mib, 32));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 4, 28 * mib + 1, 32));
  // Where two passes measured faster: small tensors, many channels, channels-first.
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 2, bytes_of(2, 32, 112, 112, 2), 32));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 2, bytes_of(8, 64, 56, 56, 2), 64));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 2, bytes_of(8, 256, 56, 56, 2), 256));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 2, 12 * mib, 65));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, false, 2, bytes_of(16, 32, 112, 112, 2), 32));
  CHECK_FALSE(batch_norm_single_pass_wanted(t, false, 4, bytes_of(16, 32, 112, 112, 4), 32));
  // Larger than the chip holds: two passes.
  CHECK_FALSE(batch_norm_single_pass_wanted(t, true, 2, bytes_of(256, 64, 112, 112, 2), 64));
  // Tables without BatchNorm figures (the default, AMD): never.
  CHECK_FALSE(batch_norm_single_pass_wanted(nullptr, true, 2, bytes_of(16, 32, 112, 112, 2), 32));
  CHECK(tuning_table_for("sm_80").batch_norm == nullptr);
  // The held single pass (channels-last, beyond the tiles): 16-bit
  // activations of 32 to 64 MiB (the H200's 51.4 MB shapes), not smaller or
  // larger ones, never fp32.
  CHECK(batch_norm_held_pass_wanted(t, 2, bytes_of(256, 2048, 7, 7, 2)));
  CHECK(batch_norm_held_pass_wanted(t, 2, bytes_of(32, 256, 56, 56, 2)));
  CHECK_FALSE(batch_norm_held_pass_wanted(t, 2, bytes_of(128, 2048, 7, 7, 2)));
  CHECK_FALSE(batch_norm_held_pass_wanted(t, 2, bytes_of(256, 1024, 14, 14, 2)));
  CHECK_FALSE(batch_norm_held_pass_wanted(t, 4, bytes_of(128, 2048, 7, 7, 4)));
  CHECK_FALSE(batch_norm_held_pass_wanted(t, 4, bytes_of(32, 256, 56, 56, 4)));
  CHECK_FALSE(batch_norm_held_pass_wanted(nullptr, 2, bytes_of(32, 256, 56, 56, 2)));
}

TEST_CASE("the sm_90 BatchNorm table spreads pass 2 over many waves on large tensors but channels-last 16-bit") {
  const BatchNormTuning *t = tuning_table_for("sm_90").batch_norm;
  REQUIRE(t != nullptr);
  auto bytes_of = [](int64_t n, int64_t c, int64_t h, int64_t w, int element) { return n * c * h * w * element; };
  // Channels-first: 4 rows per thread from 14 x 14 in 16-bit, from 7 x 7 in fp32 (64 MiB).
  CHECK(batch_norm_rows_per_thread(t, false, 2, bytes_of(256, 64, 112, 112, 2)) == 4);
  CHECK(batch_norm_rows_per_thread(t, false, 2, bytes_of(256, 512, 28, 28, 2)) == 4);
  CHECK(batch_norm_rows_per_thread(t, false, 2, bytes_of(256, 1024, 14, 14, 2)) == 4);
  CHECK(batch_norm_rows_per_thread(t, false, 2, bytes_of(256, 2048, 7, 7, 2)) == 0);
  CHECK(batch_norm_rows_per_thread(t, false, 4, bytes_of(256, 1024, 14, 14, 4)) == 4);
  CHECK(batch_norm_rows_per_thread(t, false, 4, bytes_of(256, 2048, 7, 7, 4)) == 4);
  CHECK(batch_norm_rows_per_thread(t, false, 4, bytes_of(16, 32, 112, 112, 4)) == 0);
  // Channels-last: fp32 from 28 x 28 at 8 rows per thread; 16-bit never.
  CHECK(batch_norm_rows_per_thread(t, true, 4, bytes_of(256, 512, 28, 28, 4)) == 8);
  CHECK(batch_norm_rows_per_thread(t, true, 4, bytes_of(256, 1024, 14, 14, 4)) == 0);
  CHECK(batch_norm_rows_per_thread(t, true, 2, bytes_of(256, 64, 112, 112, 2)) == 0);
  CHECK(batch_norm_rows_per_thread(nullptr, false, 2, bytes_of(256, 64, 112, 112, 2)) == 0);
}

TEST_CASE("the sm_90 BatchNorm table asks for pass 2's last-use loads up to 32 MiB") {
  const BatchNormTuning *t = tuning_table_for("sm_90").batch_norm;
  REQUIRE(t != nullptr);
  const int64_t mib = int64_t(1) << 20;
  auto bytes_of = [](int64_t n, int64_t c, int64_t h, int64_t w, int element) { return n * c * h * w * element; };
  for (bool last : {false, true})
    for (int element : {2, 4}) {
      CHECK(batch_norm_last_use_loads(t, last, element, bytes_of(16, 32, 112, 112, element)));
      CHECK(batch_norm_last_use_loads(t, last, element, 32 * mib));
      CHECK_FALSE(batch_norm_last_use_loads(t, last, element, 32 * mib + 1));
      CHECK_FALSE(batch_norm_last_use_loads(t, last, element, bytes_of(256, 2048, 7, 7, element)));
    }
  CHECK_FALSE(batch_norm_last_use_loads(nullptr, false, 2, bytes_of(16, 32, 112, 112, 2)));
}

TEST_CASE("the sm_90 BatchNorm table stages pass 2's rows in 32 KiB channels-last 16-bit and channels-first fp32 forwards") {
  const BatchNormTuning *t = tuning_table_for("sm_90").batch_norm;
  REQUIRE(t != nullptr);
  for (bool backward : {false, true}) {
    CHECK(batch_norm_stage_kib(t, backward, true, 2) == 32);
    CHECK(batch_norm_stage_kib(t, backward, true, 4) == 0);
    CHECK(batch_norm_stage_kib(t, backward, false, 2) == 0);
    CHECK(batch_norm_stage_kib(nullptr, backward, true, 2) == 0);
  }
  CHECK(batch_norm_stage_kib(t, false, false, 4) == 32);
  CHECK(batch_norm_stage_kib(t, true, false, 4) == 0);
}

TEST_CASE("ring kernels: the softmax forward's, 16-byte vectors, a row's chunks and at most seven ahead") {
  Config c;
  c.variant = Variant::kRing, c.vec = 8, c.packs = 4, c.threads = 512, c.group = 3;
  // 32768 half columns: 4096 vectors, chunks of 512 x 4: two a row, one ahead, 3 x 32 KiB.
  REQUIRE(complete_config(c, OpKind::kSoftmaxForward, 1, 32768, kSm90));
  CHECK(ring_chunks(4096, 512, 4) == 2);
  CHECK(config_shared_bytes(OpKind::kSoftmaxForward, c, 32768, 2) == 3 * 512 * 4 * 16);
  c.group = 2;  // nothing ahead: kShared's job
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 1, 32768, kSm90));
  c.group = 9;  // more slots than the ring has
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 1, 32768, kSm90));
  c.group = 7, c.packs = 2;  // 4 chunks a row, 3 ahead: 7 x 16 KiB
  CHECK(complete_config(c, OpKind::kSoftmaxForward, 1, 32768, kSm90));
  c.packs = 3;  // not instantiated
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 1, 32768, kSm90));
  c.packs = 4, c.group = 3;
  for (int op = 1; op < 4; ++op) CHECK_FALSE(complete_config(c, OpKind(op), 1, 32768, kSm90));
  c.vec = 4;  // 8-byte vectors of halves: the copies move 16 bytes
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 1, 32768, kSm90));
  c.vec = 4;
  CHECK(complete_config(c, OpKind::kSoftmaxForward, 0, 16384, kSm90));  // float32: 4 a vector
  c.blocks_per_sm = kGridCoversRows;  // a block per row: nothing to copy ahead
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 0, 16384, kSm90));
  c.blocks_per_sm = 0;
  const DeviceLimits no_async{32, 227 * 1024, true, false};
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 0, 16384, no_async));
  const DeviceLimits small_shared{32, 64 * 1024, true, true};  // 3 x 32 KiB do not fit
  CHECK_FALSE(complete_config(c, OpKind::kSoftmaxForward, 0, 16384, small_shared));
  // The candidates: only where a device has the copies, never covering the rows.
  int with = 0, covering = 0, without = 0;
  for (const Config &k : candidate_configs(OpKind::kSoftmaxForward, 1, 32768, 8, kSm90))
    if (k.variant == Variant::kRing) ++with, covering += k.blocks_per_sm == kGridCoversRows;
  for (const Config &k : candidate_configs(OpKind::kSoftmaxForward, 1, 32768, 8, no_async))
    without += k.variant == Variant::kRing;
  CHECK(with > 0);
  CHECK(covering == 0);
  CHECK(without == 0);
  CHECK(config_name(c) == "ring3.p4.t512");
}
