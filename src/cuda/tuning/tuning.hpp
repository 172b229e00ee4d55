// Launch configurations of the row-wise kernels and the per-architecture
// tuning tables that choose them. Plain C++: no device code here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xvk::gpu {

enum class OpKind : int { kSoftmaxForward = 0, kSoftmaxBackward = 1, kNormForward = 2, kNormBackward = 3 };

enum class Variant : int {
  kGroup = 0,   // a group of G <= warp lanes owns a row (ROWS rows at once), row in registers
  kBlock = 1,   // a whole block owns a row, row in registers, block-wide reductions
  kReread = 2,  // a whole block owns a row and streams it from memory twice
  kShared = 3,  // a whole block owns a row and keeps it in shared memory between its passes (not the norm backward)
  kRereadSums = 4,  // norm backward: reread, each thread keeping the dgamma/dbeta sums of its columns (dbeta's
                    // in shared memory when registers cannot hold both: reread_sums_beta_shared)
  kSharedDy = 5,    // softmax backward: as kShared, keeping dy's row only (a row pair too wide for shared memory)
  kCluster = 6,     // norm backward: a cluster of `group` blocks owns a row, each block a slice of its columns in
                    // registers, their row sums met in shared memory (thread block clusters: NVIDIA sm_90 and later)
  kRing = 7,        // softmax forward: as kShared, the block's next rows copied ahead into a ring of shared-memory
                    // slots while it works on the current one (asynchronous copies: NVIDIA sm_80 and later)
  kWarpRing = 8,    // norm forward: as kGroup with 32 lanes and a row at a time, each warp's next rows copied ahead
                    // into a ring of `group` row slots in shared memory (asynchronous copies: NVIDIA sm_80 and later)
};

// Instantiated shapes: group widths 1..32 (a sub-warp on any vendor), packs
// (vectors per lane per row) 1, 2, 3, 4, 6, 8: the threes and sixes fit the
// common widths of three times a power of two (768, 1536 columns) exactly,
// where the next power of two held a pack past the end in every lane (more
// registers, masked work). Kept short: each combination is a compiled kernel
// per dtype and architecture.
// The one list of them: fit_packs below and the kernels' instantiations
// (with_group_shape, with_block_packs in common.cuh) both read it.
using InstantiatedPacks = std::integer_sequence<int, 1, 2, 3, 4, 6, 8>;
inline constexpr int kMaxThreads = 1024;
// The fewest packs of list P (ascending) holding `vectors` per lane, else 0.
template <int... P>
constexpr int fit_packs_of(std::integer_sequence<int, P...>, int64_t vectors) {
  int fit = 0;
  ((fit == 0 && P >= vectors ? fit = P : 0), ...);  // P ascending: the first that holds them
  return fit;
}
inline constexpr int fit_packs(int64_t vectors) { return fit_packs_of(InstantiatedPacks{}, vectors); }
// The largest of them (a group of 32 lanes holds up to 256 vectors).
inline constexpr int kMaxBlockPacks = 8;
static_assert(fit_packs(kMaxBlockPacks) == kMaxBlockPacks && fit_packs(kMaxBlockPacks + 1) == 0,
              "kMaxBlockPacks is the largest of InstantiatedPacks");

// Bytes per element of a tables' dtype code (0: XVK_DTYPE_F32, else a 16-bit type).
inline constexpr int dtype_bytes(int dtype) { return dtype == 0 ? 4 : 2; }

inline constexpr bool is_backward(OpKind op) {
  return op == OpKind::kSoftmaxBackward || op == OpKind::kNormBackward;
}

// Launch bound of a register-variant kernel whose lanes each hold `elems`
// row elements (packs * vec * rows): what keeps its arrays in registers
// (65536 registers per SM / the bound = registers per thread, at most 255).
// Backward kernels hold two inputs and, for the norms, two accumulators per
// element. Checked against the compiler's spill report (ptxas -v).
// Norm backward register kernels whose lanes hold up to this many elements
// load their next rows while working on the current ones (norms.cu).
inline constexpr int kNormBackwardPrefetchElems = 32;
inline constexpr int register_kernel_max_threads(bool backward, int elems) {
  return backward ? (elems <= 8 ? 1024 : elems <= 16 ? 512 : 256) : (elems <= 32 ? 1024 : 512);
}
// The same for one op's kernel of `group` lanes per row (0: a block per row)
// on elements of elem_bytes bytes. The norm backward's group kernels also
// hold their prefetched rows and, at the end, reduce their dgamma/dbeta sums
// across lanes: with 5 to 8 elements they spilled under the 64-register
// budget of 1024 threads (ptxas, sm_90). With 17 to 24 16-bit elements
// (three packs of halves) they fit 168 registers without spilling: 384
// threads, 12 warps per SM where 256 allowed 8 (H200: norm backward 16-bit
// 49152 x 768 10% faster); float32 ones spilled there.
inline constexpr int register_kernel_max_threads(OpKind op, int group, int elems, int elem_bytes) {
  if (op == OpKind::kNormBackward && group > 0 && elems > 4 && elems <= 8) return 512;
  if (op == OpKind::kNormBackward && group > 0 && elem_bytes == 2 && elems > 16 && elems <= 24) return 384;
  return register_kernel_max_threads(is_backward(op), elems);
}

// kRereadSums: a thread keeps the dgamma and dbeta sums of its packs * vec
// columns. Both fit in registers up to 32 columns (a launch bound of 1024
// threads up to 16); beyond that, or with more threads than that bound, the
// dbeta sums move to shared memory (threads * (columns + 4) floats) and only
// dgamma's stay in registers, up to 64 columns (1024 threads up to 32).
// Its packs, the one list for complete_config and the kernels' instantiations.
using RereadSumsPacks = std::integer_sequence<int, 1, 2, 4, 8, 16>;
inline constexpr int kMaxRereadSumsElems = 64;
// Lanes of up to this many elements ask L2 for a row before streaming it (norms.cu).
inline constexpr int kRereadSumsPrefetchElems = 16;
inline constexpr int reread_sums_registers_max_threads(int elems) { return elems <= 16 ? 1024 : elems <= 32 ? 512 : 0; }
inline constexpr int reread_sums_beta_shared_max_threads(int elems) { return elems <= 32 ? 1024 : 512; }
inline constexpr bool reread_sums_beta_shared(int elems, int threads) {
  return threads > reread_sums_registers_max_threads(elems);
}
inline constexpr int reread_sums_max_threads(int elems, bool beta_shared) {
  return beta_shared ? reread_sums_beta_shared_max_threads(elems) : reread_sums_registers_max_threads(elems);
}
// Floats of one thread's run of shared dbeta sums (kRereadSums, and the
// kBlock norm backward kernels below): its columns, padded by one float4 so
// that the threads of a 16-byte access phase fall in different banks. The
// kernels lay the runs out with it (SharedBetaSums); config_shared_bytes
// sizes them.
inline constexpr int beta_sums_run_floats(int elems) { return elems + 4; }
// The bytes of a block's runs.
inline constexpr int64_t beta_sums_bytes(int threads, int elems) { return int64_t(threads) * beta_sums_run_floats(elems) * 4; }

// The norm backward's kBlock kernels whose lanes hold more than this many
// elements keep their dbeta sums in dynamic shared memory, as kRereadSums
// does: 16-bit blocks of 8 packs (64 elements a lane) spilled 572-628 bytes
// with every sum in registers (ptxas, sm_90). RMSNorm's kRms kernels, which
// have no dbeta, take none.
inline constexpr int kNormBackwardBlockBetaRegisterElems = 32;
inline constexpr bool norm_backward_block_beta_shared(int elems) {
  return elems > kNormBackwardBlockBetaRegisterElems;
}

// What a configuration must fit on the device that runs it.
struct DeviceLimits {
  int warp_size = 0;         // the device's (DeviceInfo::warp_size): no default
  int max_shared_bytes = 0;  // dynamic shared memory one block may have (0: no kShared)
  bool clusters = false;     // thread block clusters can be launched (kCluster)
  bool async_copies = false; // copies from global to shared memory run in the background (kRing)
};

// kCluster: blocks per cluster 2, 4 or 8 (8, the most every sm_90 device
// runs without opting in to larger ones). A block's slice of the row is
// ceil(vectors / blocks) vectors; each of its threads holds packs of them
// (ClusterPacks, the kernels' instantiations too) up to kMaxClusterElems
// elements, with x, dy, gamma and the dgamma/dbeta sums all in registers.
// 32 lets 16-bit lanes hold 4 packs: H200, xvk-tune's candidates at 32768
// columns, best of them against the best of the rest: LayerNorm fp16
// 0.963x the time (49152 rows), RMSNorm bf16 0.941x; bf16 LayerNorm and
// every 16384-column shape lose (1.02-1.35x), and the tuner leaves them
// (bench/results/h200-2026-12-02-norm-backward-shared-dbeta.txt).
inline constexpr int kMaxClusterBlocks = 8;
using ClusterPacks = std::integer_sequence<int, 1, 2, 4>;
inline constexpr int kMaxClusterElems = 32;
inline constexpr int cluster_kernel_max_threads(int elems) { return elems <= 4 ? 1024 : elems <= 8 ? 512 : 256; }

// kRing: each thread copies its vectors of a row, `packs` of them per chunk
// of the row (threads * packs vectors), into a ring of `group` chunk slots
// in dynamic shared memory, as stored; the slots a row does not fill hold
// the chunks of the block's next rows, their copies in flight while the
// block reduces and writes the current row. A row takes
// ring_chunks(vectors, threads, packs) slots; at most kMaxRingAhead more
// (the deepest wait the kernels spell), and at most kMaxRingSlots in all.
// Why: on the H200 the kShared and kBlock kernels of 32768-column rows keep
// one to three rows per SM and leave DRAM idle while a block reduces
// (1.13-1.15x the copy time, 1.00x on the H100's slower memory).
using RingPacks = std::integer_sequence<int, 1, 2, 4>;
inline constexpr int kMaxRingAhead = 7;
inline constexpr int kMaxRingSlots = 8;
inline constexpr int64_t ring_chunks(int64_t vectors, int threads, int packs) {
  return (vectors + int64_t(threads) * packs - 1) / (int64_t(threads) * packs);
}

// kWarpRing: a warp of 32 lanes owns a row at a time, each lane holding
// `packs` 16-byte vectors of it as kGroup's lanes do; each warp has `group`
// row slots in dynamic shared memory, which its lanes fill with the warp's
// next rows by asynchronous copies, each lane copying and reading back its
// own vectors. The grid is persistent (a warp's ring runs across its rows).
// Why: the kGroup kernels hold their rows in registers, so at 8192 rows of
// 768-1024 16-bit columns the grid covering the rows runs in two waves whose
// second starts its loads only as the first ends, and a persistent grid can
// prefetch only a row ahead; the copies keep up to kMaxWarpRingSlots rows
// per warp in flight at no register cost.
// Lanes per row: a group of 32, the whole warp on the devices that have the
// asynchronous copies (complete_config checks the warp width).
inline constexpr int kRingRowLanes = 32;
inline constexpr int kMaxWarpRingSlots = kMaxRingAhead + 1;
// Its kernels' launch bound: up to 128 registers a thread, so that lanes of
// 32 16-bit elements hold them as floats.
inline constexpr int kWarpRingMaxThreads = 512;

// kShared keeps the row as stored (the call's dtype), in whole vectors, in
// dynamic shared memory; the kernels' own static shared memory stays below
// the reserve.
inline constexpr int kSharedReserve = 1024;
inline constexpr int64_t shared_row_bytes(int64_t cols, int vec, int elem_size) {
  return (cols + vec - 1) / vec * vec * elem_size;
}
// The rows of input a kShared kernel of op keeps: x for the forwards, y and
// dy for the softmax backward; the norm backward has no kShared kernel.
inline constexpr int shared_rows(OpKind op) {
  return op == OpKind::kSoftmaxBackward ? 2 : op == OpKind::kNormBackward ? 0 : 1;
}
// The dynamic shared memory a kShared kernel of op is launched with (0: none).
inline constexpr int64_t shared_bytes(OpKind op, int64_t cols, int vec, int elem_size) {
  return shared_rows(op) * shared_row_bytes(cols, vec, elem_size);
}

struct Config {
  Variant variant = Variant::kReread;
  int vec = 1;       // elements per memory access (16 bytes worth, or 1)
  int group = 0;     // kGroup: lanes per row; kCluster: blocks per row (per cluster); kRing: chunk slots;
                     // kWarpRing: row slots per warp
  int packs = 1;     // kGroup, kBlock, kRereadSums, kCluster, kWarpRing: vectors per lane per row (kGroup, kBlock,
                     // kWarpRing: fit_packs);
                     // kRing: per lane per chunk
  int rows = 1;      // kGroup: rows per group at once (1 or 2)
  int threads = 256; // threads per block
  int blocks_per_sm = 0;  // grid: 0, as many blocks as fit at once; n > 0, at most n per SM; kGridCoversRows
};

// Whether Config::group means something for this variant (its name shows it,
// and a table row's group is the config's).
constexpr bool uses_group(Variant v) {
  return v == Variant::kGroup || v == Variant::kCluster || v == Variant::kRing || v == Variant::kWarpRing;
}

// Config::blocks_per_sm for a grid of one block per rows_per_block rows
// rather than a persistent grid of resident blocks looping over them: the
// hardware hands out blocks as slots free, so no block is left with a last
// row while the others idle. Faster for most row kernels (H200: 3-7% on
// softmax and the norm forwards), slower where a block's setup (the norm
// forward's gamma and beta) is paid per row; the tuner chooses. Not for the
// norm backward, whose partial sums are one per block.
inline constexpr int kGridCoversRows = -1;

// The dynamic shared memory the kernel of a completed Config c is launched
// with for a row of `cols` elements of elem_size bytes: the staged rows of
// kShared and kSharedDy, kRing's and kWarpRing's slots, the dbeta sums of kRereadSums and
// of the norm backward's kBlock kernels when they live there, else 0.
// complete_config checks it against the device, the launchers use it.
inline constexpr int64_t config_shared_bytes(OpKind op, const Config &c, int64_t cols, int elem_size) {
  switch (c.variant) {
    case Variant::kShared: return shared_bytes(op, cols, c.vec, elem_size);
    case Variant::kSharedDy: return op == OpKind::kSoftmaxBackward ? shared_row_bytes(cols, c.vec, elem_size) : 0;
    case Variant::kRing:
    case Variant::kWarpRing: return int64_t(c.group) * c.threads * c.packs * c.vec * elem_size;
    case Variant::kRereadSums:
      return reread_sums_beta_shared(c.packs * c.vec, c.threads) ? beta_sums_bytes(c.threads, c.packs * c.vec) : 0;
    case Variant::kBlock:
      return op == OpKind::kNormBackward && norm_backward_block_beta_shared(c.packs * c.vec)
                 ? beta_sums_bytes(c.threads, c.packs * c.vec)
                 : 0;
    default: return 0;
  }
}

// The two operators each OpKind's kernels serve, tuned apart: their
// instruction mixes differ enough to move the best launch (H200: RMSNorm
// fp16 49152 x 4096 ran 5% faster on a persistent grid, LayerNorm 6% faster
// on a grid covering the rows).
enum class Flavour : int {
  kAny = -1,    // a table row for both (untuned tables)
  kPlain = 0,   // softmax, LayerNorm
  kSecond = 1,  // log-softmax, RMSNorm
};
// The flavour of a call: second for log-softmax (args.log) and RMSNorm (args.rms).
inline constexpr Flavour flavour_of(bool log_or_rms) { return log_or_rms ? Flavour::kSecond : Flavour::kPlain; }

// One row of a tuning table: for `op` and `flavour` on `dtype`, calls with
// at most max_rows rows of at most max_cols columns use this variant (the
// first matching entry wins; tables list entries by ascending max_rows, then
// max_cols). The row bound matters because the best grid for few rows is not
// the best for many (the norm backward's partial sums grow with the grid).
struct TuningEntry {
  int op;         // OpKind
  int flavour;    // Flavour
  int dtype;      // xvk_dtype_id
  int64_t max_rows;
  int64_t max_cols;
  int variant;    // Variant
  int group;      // kGroup: lanes per row; kCluster: blocks per row
  int rows;       // kGroup: rows per group
  int packs;      // kBlock: vectors per lane (threads follow from cols)
  int threads;    // kGroup, kReread, kShared, kRereadSums: threads per block
  int blocks_per_sm;  // 0: as many as fit; > 0: a cap (keeps re-read rows in L2, bounds partial sums);
                      // kGridCoversRows: a block per rows_per_block rows
};

// BatchNorm's training forward runs as two passes over x (statistics, then
// normalize) or, when the activation fits in the shared memory of all SMs, as
// one cooperative kernel that keeps it there across a grid-wide barrier and
// reads x once. The table says for which sizes the single pass is worth it,
// per memory order (the two orders have different single-pass kernels) and
// element width: below some size the single kernel's fixed phases (one block
// per SM, grid barriers, merges) cost more than a second read of x from L2,
// and channels-last its merges grow with the channel count.
struct BatchNormTuning {
  // Activation bytes, [channels_last][4-byte elements]: one pass when
  // min <= bytes <= max; max 0: never.
  int64_t single_pass_min_bytes[2][2];
  int64_t single_pass_max_bytes[2][2];
  int64_t single_pass_last_max_channels;  // channels-last: one pass only up to this many channels
  // Channels-last activations that the tile kernel does not take (more
  // channels, or more bytes than the tiles hold) run as the held single pass
  // (the tiles keep what they can, the rest is read twice) from
  // held_min_bytes to held_max_bytes, training forwards without z only
  // (batch_norm.cu); [4-byte elements]; max 0: never.
  int64_t held_min_bytes[2];
  int64_t held_max_bytes[2];
  // Pass 2 (the rows kernels) runs one wave of blocks, each walking its share
  // of the rows, or, for activations of at least rows_spread_min_bytes, a
  // grid of about rows_per_thread rows per thread (many waves: SMs that
  // finish early take more blocks, instead of the wave ending on its slowest
  // block). [channels_last][4-byte elements]; rows_per_thread 0: one wave.
  int rows_per_thread[2][2];
  int64_t rows_spread_min_bytes[2][2];
  // Pass 2 reads x (and dy, z and the mask) with last-use loads (evict first
  // from L1 and L2) for activations of at most this many bytes, plain loads
  // above; [channels_last][4-byte elements], 0: never.
  int64_t last_use_max_bytes[2][2];
  // Training pass 2 copies the rows each thread reaches last into this many
  // KiB of shared memory per block while it waits for finalize (batch_norm.cu,
  // Staging); [backward][channels_last][4-byte elements], 0: never.
  int pass2_stage_kib[2][2][2];
  // The channels-first training forward runs as one kernel of channel groups
  // (forward_channel_groups: x read once, each block a group of whole
  // channels) where it fits, its grid is one wave and a block's tile of x is
  // at most this many KiB; [4-byte elements]; 0: never.
  int groups_max_tile_kib[2];
  // 16-bit channels-first training forwards without z run as persistent
  // blocks streaming channel groups (forward_channel_groups_streamed) where
  // a block's tile of x is at least min_tile_kib KiB, a sample's run of the
  // group's planes at most max_run_vectors 16-byte vectors, and there are at
  // least as many groups as SMs; min_tile_kib 0: never.
  int groups_streamed_min_tile_kib, groups_streamed_max_run_vectors;
  const char *source;  // the measurement behind the numbers
};

// Whether the table asks for the single-pass training forward on an
// activation of `bytes` with `channels` channels (the kernel must still fit,
// which batch_norm.cu checks). NULL table: never.
bool batch_norm_single_pass_wanted(const BatchNormTuning *t, bool channels_last, int element_bytes, int64_t bytes,
                                   int64_t channels);

// Whether the table asks for the held single pass (channels-last) on an
// activation of `bytes` (batch_norm.cu checks that it can run). NULL table:
// never.
bool batch_norm_held_pass_wanted(const BatchNormTuning *t, int element_bytes, int64_t bytes);

// Rows per thread for BatchNorm's pass 2 on an activation of `bytes`, or 0
// for one wave of blocks. NULL table: 0.
int batch_norm_rows_per_thread(const BatchNormTuning *t, bool channels_last, int element_bytes, int64_t bytes);

// Whether BatchNorm's pass 2 reads with last-use loads on an activation of
// `bytes`. NULL table: never.
bool batch_norm_last_use_loads(const BatchNormTuning *t, bool channels_last, int element_bytes, int64_t bytes);

// The largest tile (KiB a block) with which the table asks for the
// channels-first training forward as channel groups (batch_norm.cu checks the
// rest), or 0. NULL table: 0.
int batch_norm_groups_max_tile_kib(const BatchNormTuning *t, int element_bytes);

// The smallest tile (KiB a block) with which the table asks for the streamed
// channel groups (16-bit, no z; batch_norm.cu checks the rest), or 0. NULL
// table: 0.
int batch_norm_groups_streamed_min_tile_kib(const BatchNormTuning *t);
// The longest run (16-byte vectors) it is asked for with. NULL table: 0.
int batch_norm_groups_streamed_max_run_vectors(const BatchNormTuning *t);

// KiB of shared memory per block in which BatchNorm's training pass 2 stages
// rows while finalize runs, or 0. NULL table: 0.
int batch_norm_stage_kib(const BatchNormTuning *t, bool backward, bool channels_last, int element_bytes);

struct TuningTable {
  const char *name;  // where and how it was produced
  const TuningEntry *entries;
  int count;
  const BatchNormTuning *batch_norm;  // NULL: BatchNorm takes the default (two passes)
};

// Devices of one architecture can differ in their memory: the sm_90 ones
// range from 2 TB/s (H100 PCIe) through 3.35 (H100 SXM, HBM3) to 4.8 (H200,
// HBM3e) with the same SMs, and the faster memory wants more bytes in flight
// per SM, so launch parameters tuned on one are not the best on the other
// (wide rows up to 19% apart on an H200 between its own table and the
// H100's: bench/results/h200-2026-11-29-rows-h200-table.txt). A table is
// therefore chosen by architecture and peak memory bandwidth.
// Peak DRAM bandwidth in GB/s from the memory clock (kHz) and bus width
// (bits), two transfers per clock; 0 when either is unknown (0).
constexpr int peak_memory_gbps(int64_t memory_clock_khz, int64_t bus_width_bits) {
  return int(2 * memory_clock_khz * (bus_width_bits / 8) / 1000000);
}

// The table for an architecture (e.g. "sm_90") on a device of
// memory_gbps peak bandwidth (0, unknown, takes the table of its slowest
// devices), or the conservative default. The environment variable XVK_TUNING_TABLE,
// when it names one of the tables (tuning_table_key), takes that one
// instead: for same-run comparisons of two tables; other values are ignored.
const TuningTable &tuning_table_for(const char *arch, int memory_gbps = 0);

// The short name XVK_TUNING_TABLE knows a table by ("sm_90", "sm_90-h200",
// "default"), and the C++ name of its definition (xvk-tune writes it).
const char *tuning_table_key(const TuningTable &table);
const char *tuning_table_symbol(const TuningTable &table);

// A table's rows by operator and dtype, in table order: a call's lookup reads
// only the rows it can match. (Read whole, the 672 rows of the H200's table
// took up to 0.72 us per lookup on the H200 machine's host, RMSNorm's
// backward being last, and 0.20 us for LayerNorm's forward; through the
// index 0.09 and 0.014 us.) Built once per device.
class TuningIndex {
 public:
  TuningIndex() = default;
  explicit TuningIndex(const TuningTable &table);
  // Positions in the table of the rows for (op, dtype); empty for an unknown pair.
  const std::vector<int> &rows_for(OpKind op, int dtype) const;

 private:
  static constexpr int kOps = 4, kDtypes = 3;
  std::vector<int> rows_[kOps][kDtypes];
};

// The configuration for one call. `vec` is the vector width the tensors'
// alignment allows (1 when any pointer or stride breaks it). A table row that
// does not fit the call (say, too many threads) falls back to the default
// rule, never to a failure. `index` must be the table's own.
Config choose_config(const TuningTable &table, const TuningIndex &index, OpKind op, Flavour flavour, int dtype,
                     int64_t rows, int64_t cols, int vec, const DeviceLimits &limits);
// The same, indexing the table for this one call (for tools and tests).
Config choose_config(const TuningTable &table, OpKind op, Flavour flavour, int dtype, int64_t rows, int64_t cols,
                     int vec, const DeviceLimits &limits);

// The default rule: registers while a row fits, re-reading beyond.
Config default_config(OpKind op, int dtype, int64_t cols, int vec, const DeviceLimits &limits);

// The variant's name in benchmark tables and tool output ("group", "shared", ...).
const char *variant_name(Variant v);

// A configuration as benchmark tables, the tuner and the variant suite name
// it: the variant, then G for groups, p packs, r rows per group, t threads,
// and the grid, ".all" (kGridCoversRows) or ".bN" (at most N blocks per SM):
// "group8.p1.r2.t128.all", "block.p4.t256.b2", "shared.p1.t512".
std::string config_name(const Config &c);

// Every configuration the tuner times for a call (those complete_config
// accepts), which the variant suite also runs one by one.
std::vector<Config> candidate_configs(OpKind op, int dtype, int64_t cols, int vec, const DeviceLimits &limits);

// Fills in packs/threads for a variant and checks it can run on a call of
// `cols` columns of `dtype`; false if not.
bool complete_config(Config &c, OpKind op, int dtype, int64_t cols, const DeviceLimits &limits);

}  // namespace xvk::gpu
