#include "cuda/tuning/tuning.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace xvk::gpu {

extern const TuningTable kTuningDefault;  // tuning/default.cpp: the default rule
#if XVK_TUNING_HIP
extern const TuningTable kTuningCdnaWave64;  // src/hip/tuning/cdna_wave64.cpp (untuned)
extern const TuningTable kTuningRdnaWave32;  // src/hip/tuning/rdna_wave32.cpp (untuned)
#else
extern const TuningTable kTuningSm90;      // tuning/sm90.cpp, produced by xvk-tune on an H100
extern const TuningTable kTuningSm90H200;  // tuning/sm90_h200.cpp, produced by xvk-tune on an H200
#endif

namespace {

int next_pow2(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether a block may have `bytes` of dynamic shared memory beside the
// kernels' own static shared memory (kSharedReserve).
bool fits_shared(int64_t bytes, const DeviceLimits &limits) { return bytes + kSharedReserve <= limits.max_shared_bytes; }

// Every table, for both backends: the CUDA module is built with the NVIDIA
// rows, the HIP module (XVK_TUNING_HIP) with the AMD ones. A device takes the
// first row of its architecture whose min_memory_gbps its peak bandwidth
// reaches. The AMD names are the targets the hip preset compiles for.
struct ArchTable {
  const char *arch;     // DeviceInfo::arch: "sm_90", or gcnArchName up to its first ':'
  int min_memory_gbps;  // peak_memory_gbps at least this
  const char *key;      // XVK_TUNING_TABLE's name for it
  const char *symbol;   // its definition's name (TABLE: spelled once with it)
  const TuningTable *table;
};
#define TABLE(definition) #definition, &definition
const ArchTable kArchTables[] = {
#if XVK_TUNING_HIP
    {"gfx908", 0, "cdna-wave64", TABLE(kTuningCdnaWave64)},   // MI100
    {"gfx90a", 0, "cdna-wave64", TABLE(kTuningCdnaWave64)},   // MI200
    {"gfx940", 0, "cdna-wave64", TABLE(kTuningCdnaWave64)},   // MI300 series, early ISA (ROCm 5.2 has no gfx942)
    {"gfx1030", 0, "rdna-wave32", TABLE(kTuningRdnaWave32)},  // Navi 21: RX 6800/6900, PRO W6800
#else
    {"sm_90", 4000, "sm_90-h200", TABLE(kTuningSm90H200)},  // H200 (4.8 TB/s), GH200 with HBM3e
    {"sm_90", 0, "sm_90", TABLE(kTuningSm90)},              // H100 (2-3.9 TB/s)
#endif
};
const ArchTable kDefaultRow = {"", 0, "default", TABLE(kTuningDefault)};
#undef TABLE

const ArchTable &row_of(const TuningTable &table) {
  for (const ArchTable &t : kArchTables)
    if (t.table == &table) return t;
  return kDefaultRow;
}

// XVK_TUNING_TABLE's table, or nullptr (unset or not a table's key).
const TuningTable *table_override() {
  const char *e = std::getenv("XVK_TUNING_TABLE");
  if (!e || !e[0]) return nullptr;
  if (std::strcmp(e, kDefaultRow.key) == 0) return kDefaultRow.table;
  for (const ArchTable &t : kArchTables)
    if (std::strcmp(e, t.key) == 0) return t.table;
  return nullptr;
}

}  // namespace

const TuningTable &tuning_table_for(const char *arch, int memory_gbps) {
  if (const TuningTable *forced = table_override()) return *forced;
  for (const ArchTable &t : kArchTables)
    if (std::strcmp(arch, t.arch) == 0 && memory_gbps >= t.min_memory_gbps) return *t.table;
  return kTuningDefault;
}

const char *tuning_table_key(const TuningTable &table) { return row_of(table).key; }
const char *tuning_table_symbol(const TuningTable &table) { return row_of(table).symbol; }

bool complete_config(Config &c, OpKind op, int dtype, int64_t cols, const DeviceLimits &limits) {
  const int warp_size = limits.warp_size;
  const int elem_size = dtype_bytes(dtype);
  const int64_t vectors = ceil_div(cols, c.vec);
  if (c.blocks_per_sm < 0 && (c.blocks_per_sm != kGridCoversRows || op == OpKind::kNormBackward)) return false;
  switch (c.variant) {
    case Variant::kGroup: {
      if (c.group < 1 || c.group > 32 || c.group > warp_size || (c.group & (c.group - 1))) return false;
      if (c.rows != 1 && c.rows != 2) return false;
      c.packs = fit_packs(ceil_div(vectors, c.group));
      if (c.packs == 0 || (c.packs > 1 && c.group < 32) || (c.packs > 1 && c.rows > 1)) return false;
      return c.threads >= warp_size && c.threads % warp_size == 0 &&
             c.threads <= register_kernel_max_threads(op, c.group, c.packs * c.vec * c.rows, elem_size);
    }
    case Variant::kBlock: {
      if (fit_packs(c.packs) != c.packs) return false;  // an instantiated count
      const int64_t lanes = ceil_div(vectors, c.packs);
      c.threads = int(ceil_div(lanes, warp_size) * warp_size);
      // Threads rounded up to whole warps may hold the row in fewer packs
      // (1536 half columns: 4 packs make 48 lanes, 64 threads, which hold
      // the row in 3): take the fewest, so no lane holds a pack past the end.
      c.packs = fit_packs(ceil_div(vectors, c.threads));
      c.rows = 1;
      // A block of few threads leaves the reductions' barriers exposed; the
      // group variant serves such rows better, so only take real blocks.
      const int64_t bytes = config_shared_bytes(op, c, cols, elem_size);
      return c.threads >= 2 * warp_size && c.threads <= register_kernel_max_threads(op, 0, c.packs * c.vec, elem_size) &&
             (bytes == 0 || fits_shared(bytes, limits));
    }
    case Variant::kReread:
      c.rows = 1;
      return c.threads >= warp_size && c.threads <= kMaxThreads && c.threads % warp_size == 0;
    case Variant::kRereadSums: {
      c.rows = 1;
      if (op != OpKind::kNormBackward || c.threads < 2 * warp_size || c.threads % warp_size != 0) return false;
      c.packs = fit_packs_of(RereadSumsPacks{}, ceil_div(vectors, c.threads));
      const int elems = c.packs * c.vec;
      if (c.packs == 0 || elems > kMaxRereadSumsElems) return false;
      const bool beta_shared = reread_sums_beta_shared(elems, c.threads);
      if (c.threads > reread_sums_max_threads(elems, beta_shared)) return false;
      return !beta_shared || fits_shared(config_shared_bytes(op, c, cols, elem_size), limits);
    }
    case Variant::kCluster: {
      c.rows = 1;
      const int blocks = c.group;
      if (op != OpKind::kNormBackward || !limits.clusters || blocks < 2 || blocks > kMaxClusterBlocks ||
          (blocks & (blocks - 1)) || c.threads < 2 * warp_size || c.threads % warp_size != 0)
        return false;
      const int64_t slice = ceil_div(vectors, blocks);  // vectors per block
      // Every block holds part of the row: with fewer vectors than blocks
      // (or the last slice empty) the cluster is too large for the row.
      if (slice * (blocks - 1) >= vectors) return false;
      c.packs = fit_packs_of(ClusterPacks{}, ceil_div(slice, c.threads));
      if (c.packs == 0 || c.packs * c.vec > kMaxClusterElems) return false;
      // No warp left without columns: the threads the slice needs, in whole warps.
      return c.threads <= ceil_div(ceil_div(slice, c.packs), warp_size) * warp_size &&
             c.threads <= cluster_kernel_max_threads(c.packs * c.vec);
    }
    case Variant::kRing: {
      // The softmax forward's, on the 16-byte vectors the copies move whole;
      // never on a grid covering the rows (a block's ring runs across its rows).
      c.rows = 1;
      if (op != OpKind::kSoftmaxForward || !limits.async_copies || c.vec * elem_size != 16 ||
          c.blocks_per_sm == kGridCoversRows || fit_packs_of(RingPacks{}, c.packs) != c.packs ||
          c.threads < 2 * warp_size || c.threads > kMaxThreads || c.threads % warp_size != 0)
        return false;
      const int64_t chunks = ring_chunks(vectors, c.threads, c.packs);
      return c.group > chunks && c.group - chunks <= kMaxRingAhead && c.group <= kMaxRingSlots &&
             fits_shared(config_shared_bytes(op, c, cols, elem_size), limits);
    }
    case Variant::kWarpRing: {
      // The norm forward's, on the 16-byte vectors the copies move whole, on
      // warps of kRingRowLanes lanes; never on a grid covering the rows.
      c.rows = 1;
      if (op != OpKind::kNormForward || !limits.async_copies || warp_size != kRingRowLanes || c.vec * elem_size != 16 ||
          c.blocks_per_sm == kGridCoversRows || c.group < 2 || c.group > kMaxWarpRingSlots)
        return false;
      c.packs = fit_packs(ceil_div(vectors, kRingRowLanes));
      return c.packs > 0 && c.threads >= warp_size && c.threads % warp_size == 0 && c.threads <= kWarpRingMaxThreads &&
             fits_shared(config_shared_bytes(op, c, cols, elem_size), limits);
    }
    case Variant::kShared:
    case Variant::kSharedDy: {
      c.rows = 1;
      const int64_t bytes = config_shared_bytes(op, c, cols, elem_size);
      const bool fits = bytes > 0 && fits_shared(bytes, limits);
      return fits && c.threads >= warp_size && c.threads <= kMaxThreads && c.threads % warp_size == 0;
    }
  }
  return false;
}

Config default_config(OpKind op, int dtype, int64_t cols, int vec, const DeviceLimits &limits) {
  const int64_t vectors = ceil_div(cols, vec);
  Config c;
  c.vec = vec;
  if (vectors <= 32) {  // a sub-warp group per row, two rows at once for ILP when narrow
    c.variant = Variant::kGroup;
    c.group = next_pow2(vectors);
    c.rows = c.group <= 8 ? 2 : 1;
    c.threads = 128;
  } else if (vectors <= 32 * 4) {  // a full group of 32 lanes, a few vectors each
    c.variant = Variant::kGroup;
    c.group = 32;
    c.rows = 1;
    c.threads = 128;
  } else {  // a block per row while the row fits in registers: the fewest packs that fit
    c.variant = Variant::kBlock;
    for (c.packs = 1; c.packs <= kMaxBlockPacks; c.packs *= 2)
      if (complete_config(c, op, dtype, cols, limits)) return c;
  }
  if (c.variant != Variant::kBlock && complete_config(c, op, dtype, cols, limits)) return c;
  // Too wide for registers: a forward or softmax backward keeps the row in
  // shared memory while it fits there (one read of it), anything else
  // streams it twice.
  c = Config{};
  c.variant = Variant::kShared;
  c.vec = vec;
  c.threads = 512;
  if (complete_config(c, op, dtype, cols, limits)) return c;
  c.variant = Variant::kReread;
  complete_config(c, op, dtype, cols, limits);
  return c;
}

const char *variant_name(Variant v) {
  switch (v) {
    case Variant::kGroup: return "group";
    case Variant::kBlock: return "block";
    case Variant::kReread: return "reread";
    case Variant::kShared: return "shared";
    case Variant::kRereadSums: return "rereadsums";
    case Variant::kSharedDy: return "shareddy";
    case Variant::kCluster: return "cluster";
    case Variant::kRing: return "ring";
    case Variant::kWarpRing: return "wring";
  }
  return "?";
}

std::string config_name(const Config &c) {
  std::string s = variant_name(c.variant);
  if (uses_group(c.variant)) s += std::to_string(c.group);
  s += ".p" + std::to_string(c.packs);
  if (c.variant == Variant::kGroup) s += ".r" + std::to_string(c.rows);
  s += ".t" + std::to_string(c.threads);
  if (c.blocks_per_sm == kGridCoversRows)
    s += ".all";
  else if (c.blocks_per_sm > 0)
    s += ".b" + std::to_string(c.blocks_per_sm);
  return s;
}

std::vector<Config> candidate_configs(OpKind op, int dtype, int64_t cols, int vec, const DeviceLimits &limits) {
  std::vector<Config> out;
  for (int g = 1; g <= 32; g *= 2)
    for (int rows = 1; rows <= 2; ++rows)
      for (int threads : {128, 256, 512}) {
        Config c;
        c.variant = Variant::kGroup, c.vec = vec, c.group = g, c.rows = rows, c.threads = threads;
        if (complete_config(c, op, dtype, cols, limits)) out.push_back(c);
      }
  for (int packs = 1; packs <= kMaxBlockPacks; packs *= 2) {
    Config c;
    c.variant = Variant::kBlock, c.vec = vec, c.packs = packs;
    if (!complete_config(c, op, dtype, cols, limits)) continue;
    // Two packs counts may round to the same threads and packs: keep one.
    const Config *last = out.empty() ? nullptr : &out.back();
    if (last && last->variant == Variant::kBlock && last->packs == c.packs && last->threads == c.threads) continue;
    out.push_back(c);
  }
  for (Variant v : {Variant::kReread, Variant::kShared, Variant::kSharedDy, Variant::kRereadSums})
    for (int threads : {256, 512, 1024}) {
      Config c;
      c.variant = v, c.vec = vec, c.threads = threads;
      if (complete_config(c, op, dtype, cols, limits)) out.push_back(c);
    }
  for (int blocks = 2; blocks <= kMaxClusterBlocks; blocks *= 2)
    for (int threads : {128, 256, 512, 1024}) {
      Config c;
      c.variant = Variant::kCluster, c.vec = vec, c.group = blocks, c.threads = threads;
      if (complete_config(c, op, dtype, cols, limits)) out.push_back(c);
    }
  // kRing where a row fills at least a 16-byte vector per lane of 512
  // threads: one or two chunks ahead, or as many as the slots allowed.
  if (op == OpKind::kSoftmaxForward && vec * dtype_bytes(dtype) == 16 && cols * dtype_bytes(dtype) >= 8192)
    for (int threads : {512, 1024})
      for (int packs : {2, 4}) {
        Config c;
        c.variant = Variant::kRing, c.vec = vec, c.group = 1, c.packs = packs, c.threads = threads;
        const int64_t chunks = ring_chunks(ceil_div(cols, vec), threads, packs);
        const int64_t slot_bytes = config_shared_bytes(op, c, cols, dtype_bytes(dtype));  // of one slot
        const int64_t most = std::min<int64_t>({kMaxRingSlots, chunks + kMaxRingAhead,
                                                (limits.max_shared_bytes - kSharedReserve) / slot_bytes});
        int64_t last = 0;
        for (int64_t slots : {chunks + 1, chunks + 2, most}) {  // ascending, but for a `most` below them
          if (slots > most || slots <= last) continue;
          last = slots;
          c.group = int(slots);
          Config done = c;
          if (complete_config(done, op, dtype, cols, limits)) out.push_back(done);
        }
      }
  // kWarpRing: two to kMaxWarpRingSlots rows per warp in flight.
  if (op == OpKind::kNormForward)
    for (int slots : {2, 3, 4, 6, 8})
      for (int threads : {128, 256, 512}) {
        Config c;
        c.variant = Variant::kWarpRing, c.vec = vec, c.group = slots, c.threads = threads;
        if (complete_config(c, op, dtype, cols, limits)) out.push_back(c);
      }
  // Capping resident blocks keeps a re-read row in L2 between its two passes,
  // and makes fewer partial sums for the norm backward. A grid covering the
  // rows (no persistent loop) suits the rest.
  const size_t base = out.size();
  for (size_t i = 0; i < base; ++i) {
    if (out[i].variant == Variant::kReread || op == OpKind::kNormBackward)
      for (int cap : {1, 2}) {
        Config c = out[i];
        c.blocks_per_sm = cap;
        out.push_back(c);
      }
    if (op != OpKind::kNormBackward && out[i].variant != Variant::kRing && out[i].variant != Variant::kWarpRing) {
      Config c = out[i];
      c.blocks_per_sm = kGridCoversRows;
      out.push_back(c);
    }
  }
  return out;
}

bool batch_norm_single_pass_wanted(const BatchNormTuning *t, bool channels_last, int element_bytes, int64_t bytes,
                                   int64_t channels) {
  if (!t) return false;
  const int order = channels_last ? 1 : 0, wide = element_bytes == 4 ? 1 : 0;
  if (bytes < t->single_pass_min_bytes[order][wide] || bytes > t->single_pass_max_bytes[order][wide]) return false;
  return !channels_last || channels <= t->single_pass_last_max_channels;
}

bool batch_norm_held_pass_wanted(const BatchNormTuning *t, int element_bytes, int64_t bytes) {
  if (!t) return false;
  const int wide = element_bytes == 4 ? 1 : 0;
  return bytes >= t->held_min_bytes[wide] && bytes <= t->held_max_bytes[wide];
}

int batch_norm_groups_max_tile_kib(const BatchNormTuning *t, int element_bytes) {
  return t ? t->groups_max_tile_kib[element_bytes == 4 ? 1 : 0] : 0;
}

int batch_norm_groups_streamed_min_tile_kib(const BatchNormTuning *t) { return t ? t->groups_streamed_min_tile_kib : 0; }
int batch_norm_groups_streamed_max_run_vectors(const BatchNormTuning *t) {
  return t ? t->groups_streamed_max_run_vectors : 0;
}

int batch_norm_rows_per_thread(const BatchNormTuning *t, bool channels_last, int element_bytes, int64_t bytes) {
  if (!t) return 0;
  const int order = channels_last ? 1 : 0, wide = element_bytes == 4 ? 1 : 0;
  return bytes >= t->rows_spread_min_bytes[order][wide] ? t->rows_per_thread[order][wide] : 0;
}

bool batch_norm_last_use_loads(const BatchNormTuning *t, bool channels_last, int element_bytes, int64_t bytes) {
  if (!t) return false;
  const int order = channels_last ? 1 : 0, wide = element_bytes == 4 ? 1 : 0;
  return bytes <= t->last_use_max_bytes[order][wide];
}

int batch_norm_stage_kib(const BatchNormTuning *t, bool backward, bool channels_last, int element_bytes) {
  if (!t) return 0;
  return t->pass2_stage_kib[backward ? 1 : 0][channels_last ? 1 : 0][element_bytes == 4 ? 1 : 0];
}

TuningIndex::TuningIndex(const TuningTable &table) {
  for (int i = 0; i < table.count; ++i) {
    const TuningEntry &e = table.entries[i];
    if (e.op >= 0 && e.op < kOps && e.dtype >= 0 && e.dtype < kDtypes) rows_[e.op][e.dtype].push_back(i);
  }
}

const std::vector<int> &TuningIndex::rows_for(OpKind op, int dtype) const {
  static const std::vector<int> kNone;
  const int o = int(op);
  return o >= 0 && o < kOps && dtype >= 0 && dtype < kDtypes ? rows_[o][dtype] : kNone;
}

Config choose_config(const TuningTable &table, const TuningIndex &index, OpKind op, Flavour flavour, int dtype,
                     int64_t rows, int64_t cols, int vec, const DeviceLimits &limits) {
  // Tables are tuned on the vector path; the scalar path (odd sizes, unaligned
  // tensors) takes the default rule.
  if (vec > 1) {
    for (const int i : index.rows_for(op, dtype)) {
      const TuningEntry &e = table.entries[i];
      if ((e.flavour != int(Flavour::kAny) && e.flavour != int(flavour)) || rows > e.max_rows || cols > e.max_cols)
        continue;
      Config c;
      c.variant = Variant(e.variant);
      c.vec = vec;
      c.group = e.group;
      c.rows = e.rows;
      c.packs = e.packs;
      c.threads = e.threads;
      c.blocks_per_sm = e.blocks_per_sm;
      if (complete_config(c, op, dtype, cols, limits)) return c;
      break;
    }
  }
  return default_config(op, dtype, cols, vec, limits);
}

Config choose_config(const TuningTable &table, OpKind op, Flavour flavour, int dtype, int64_t rows, int64_t cols,
                     int vec, const DeviceLimits &limits) {
  return choose_config(table, TuningIndex(table), op, flavour, dtype, rows, cols, vec, limits);
}

}  // namespace xvk::gpu
