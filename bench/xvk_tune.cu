// xvk-tune: produces a tuning table (src/cuda/tuning/sm90.cpp, sm90_h200.cpp:
// the one tuning_table_for gives the GPU it runs on) for that GPU. For every operator (softmax, log-softmax, LayerNorm, RMSNorm;
// forward and backward), dtype, row count (8192 standing for
// up to 16384 rows, 49152 for more) and column count of its grid, it runs each candidate launch
// configuration, checks its output against the default rule's, times it
// (median of L2-flushed launches) and keeps the fastest.
//
//   xvk-tune [--reps N] [--out FILE] [--quick] [--op K --every [--shape ROWSxCOLS] [--no-param-grads]]
//
// --op K tunes OpKind K alone (0 softmax forward ... 3 norm backward); with
// --out it replaces that operator's rows of the table already in FILE (and
// says so in its header), else it writes nothing. --every also prints each
// candidate's time. --shape (with --op, without --out) times one shape of the
// grid alone, every flavour and dtype: ROWS is a bucket's row count (8192 or
// 49152), COLS one of the grid's widths. --no-param-grads (with --op 3)
// times the norm backward without dgamma and dbeta: what their partial sums
// and finalize cost, by difference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "kernel_context.cuh"

using namespace bench;
using namespace xvk::gpu;

namespace {

// Largest |a - b| over n elements, relative to the largest |b| (device side).
template <class T>
__global__ void max_diff_kernel(const T *a, const T *b, size_t n, float *out) {
  float diff = 0.0f, scale = 0.0f;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = float(a[i]), y = float(b[i]);
    diff = fmaxf(diff, (x != x) != (y != y) ? __builtin_huge_valf() : fabsf(x - y));
    scale = fmaxf(scale, fabsf(y));
  }
  atomicMax(reinterpret_cast<int *>(out), __float_as_int(diff));  // non-negative floats order like ints
  atomicMax(reinterpret_cast<int *>(out) + 1, __float_as_int(scale));
}

float relative_diff(const void *a, const void *b, int dtype, size_t n) {
  static float *d = nullptr;
  if (!d) CUDA_OK(cudaMalloc(&d, 2 * sizeof(float)));
  CUDA_OK(cudaMemsetAsync(d, 0, 2 * sizeof(float), g_stream));
  if (dtype == 0) max_diff_kernel<<<512, 256, 0, g_stream>>>((const float *)a, (const float *)b, n, d);
  if (dtype == 1) max_diff_kernel<<<512, 256, 0, g_stream>>>((const __half *)a, (const __half *)b, n, d);
  if (dtype == 2) max_diff_kernel<<<512, 256, 0, g_stream>>>((const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, n, d);
  float h[2];
  CUDA_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  return h[0] / std::max(h[1], 1e-30f);
}

// By OpKind, then Flavour (plain, second).
const char *kOpNames[][2] = {{"softmax forward", "log-softmax forward"},
                             {"softmax backward", "log-softmax backward"},
                             {"LayerNorm forward", "RMSNorm forward"},
                             {"LayerNorm backward", "RMSNorm backward"}};
const char *kDtypeNames[] = {"float32", "float16", "bfloat16"};

// The table file's text, or false (with a message) when it cannot be read.
bool read_file(const char *path, std::string *text) {
  FILE *f = std::fopen(path, "r");
  if (!f) return std::fprintf(stderr, "xvk-tune: cannot read %s\n", path), false;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text->append(buf, n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  if (!ok) std::fprintf(stderr, "xvk-tune: cannot read %s\n", path);
  return ok;
}

// Writes the table; false (with a message) when the file cannot be written.
bool write_file(const char *path, const std::string &text) {
  FILE *f = std::fopen(path, "w");
  const bool ok = f && std::fputs(text.c_str(), f) >= 0;
  if (f && std::fclose(f) == 0 && ok) return true;
  return std::fprintf(stderr, "xvk-tune: cannot write %s\n", path), false;
}

}  // namespace

int main(int argc, char **argv) {
  const char *out_path = nullptr;
  bool quick = false, every = false, no_param_grads = false;
  int only_op = -1;
  long long only_rows = 0, only_cols = 0;  // --shape
  g_reps = 15;
  g_warm_up_ms = 3.0;  // candidates run back to back: the clocks are up after the first
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = parse_reps("--reps", argv[++i]);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--op") && i + 1 < argc) {
      // An OpKind, 0 to 3: anything else would tune nothing and leave the table as it was.
      char *end = nullptr;
      const long k = std::strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || k < 0 || k > 3)
        return std::fprintf(stderr, "xvk-tune: --op wants an OpKind from 0 to 3, got '%s'\n", argv[i]), 2;
      only_op = int(k);
    }
    else if (!std::strcmp(argv[i], "--every")) every = true;
    else if (!std::strcmp(argv[i], "--no-param-grads")) no_param_grads = true;
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      int used = 0;
      if (std::sscanf(argv[++i], "%lldx%lld%n", &only_rows, &only_cols, &used) != 2 || argv[i][used] != '\0')
        return std::fprintf(stderr, "xvk-tune: --shape wants ROWSxCOLS, got '%s'\n", argv[i]), 2;
    }
    else return std::fprintf(stderr, "usage: xvk-tune [--reps N] [--out FILE] [--quick] [--op K --every [--shape ROWSxCOLS] [--no-param-grads]]\n"), 2;
  }
  // A table needs every shape: --shape only prints.
  if ((only_cols || no_param_grads) && (only_op < 0 || out_path))
    return std::fprintf(stderr, "xvk-tune: --shape and --no-param-grads go with --op and without --out\n"), 2;
  // Row buckets: (rows tuned at, largest rows the entries apply to).
  const std::vector<std::pair<int64_t, int64_t>> buckets = {{8192, 16384}, {49152, INT64_MAX}};
  const std::vector<int64_t> grid = quick ? std::vector<int64_t>{32, 1024, 8192}
                                          : std::vector<int64_t>{32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 4096, 5120, 8192, 16384, 32768};
  if (only_cols) {
    const bool bucket = std::any_of(buckets.begin(), buckets.end(), [&](const auto &b) { return b.first == only_rows; });
    if (!bucket || std::find(grid.begin(), grid.end(), int64_t(only_cols)) == grid.end())
      return std::fprintf(stderr, "xvk-tune: --shape %lldx%lld is not in the grid (rows 8192 or 49152)\n", only_rows, only_cols), 2;
  }
  // --op K --out FILE merges into the table in FILE: read it before the GPU is touched.
  std::string old_file;
  if (only_op >= 0 && out_path && !read_file(out_path, &old_file)) return 2;
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  Context ctx;
  init_kernel_context(ctx);
  const DeviceLimits limits = ctx.info->limits();
  const int64_t max_rows = 49152, max_cols = 32768;
  const size_t big = size_t(max_rows * max_cols) * 4;
  Buffer x(big), dy(big), out(big), ref(big), gamma(max_cols * 4), beta(max_cols * 4), dgamma(max_cols * 4),
      dgamma_ref(max_cols * 4), dbeta(max_cols * 4), mean(max_rows * 4), rstd(max_rows * 4);
  std::string table;
  int entries = 0, rejected = 0;
  for (const auto &[rows, rows_bound] : buckets)
  if (!only_cols || rows == only_rows)
  for (int op = 0; op < 4; ++op)
  if (only_op < 0 || op == only_op)
  for (int flavour = 0; flavour < 2; ++flavour)
    for (int dtype = 0; dtype < 3; ++dtype)
      for (int64_t cols : grid) {
        if (only_cols && cols != only_cols) continue;
        const size_t n = size_t(rows * cols), es = dtype == 0 ? 4 : 2;
        fill(x.p, dtype, n, 11, 0.5f, 2.0f);
        fill(dy.p, dtype, n, 12, 0.0f, 1.0f);
        fill(gamma.p, dtype, size_t(cols), 13, 1.0f, 0.1f);
        fill(beta.p, dtype, size_t(cols), 14, 0.0f, 0.1f);
        xvk_softmax_forward_args sf{};
        sf.rows = rows, sf.cols = cols, sf.dtype = dtype, sf.scale = 1.0f, sf.x = {x.p, cols}, sf.y = {out.p, cols};
        sf.log = flavour;
        xvk_softmax_backward_args sb{};
        sb.rows = rows, sb.cols = cols, sb.dtype = dtype, sb.scale = 1.0f, sb.y = {x.p, cols}, sb.dy = {dy.p, cols},
        sb.dx = {out.p, cols};
        sb.log = flavour;
        xvk_norm_forward_args nf{};
        nf.rows = rows, nf.cols = cols, nf.dtype = dtype, nf.epsilon = 1e-5f, nf.x = {x.p, cols}, nf.y = {out.p, cols};
        nf.gamma = gamma.p, nf.beta = beta.p, nf.param_dtype = dtype;
        nf.mean = static_cast<float *>(mean.p), nf.rstd = static_cast<float *>(rstd.p);
        nf.rms = flavour;
        if (flavour) nf.beta = nullptr, nf.mean = nullptr;  // RMSNorm has neither (nor its backward a mean)
        CUDA_OK(cudaSuccess);
        if (norm_forward(ctx, nf, nullptr) != XVK_SUCCESS) return std::fprintf(stderr, "norm_forward failed\n"), 1;
        xvk_norm_backward_args nb{};
        nb.rows = rows, nb.cols = cols, nb.dtype = dtype, nb.dy = {dy.p, cols}, nb.x = {x.p, cols}, nb.dx = {out.p, cols};
        nb.gamma = gamma.p, nb.param_dtype = dtype, nb.mean = nf.mean, nb.rstd = nf.rstd;
        nb.dgamma = dgamma.p, nb.dbeta = flavour ? nullptr : dbeta.p, nb.dparam_dtype = dtype;
        if (no_param_grads) nb.dgamma = nb.dbeta = nullptr;
        nb.rms = flavour;
        auto run = [&](const Config *c) {
          switch (OpKind(op)) {
            case OpKind::kSoftmaxForward: return softmax_forward(ctx, sf, c);
            case OpKind::kSoftmaxBackward: return softmax_backward(ctx, sb, c);
            case OpKind::kNormForward: return norm_forward(ctx, nf, c);
            case OpKind::kNormBackward: return norm_backward(ctx, nb, c);
          }
          return XVK_ERROR_INTERNAL;
        };
        // Reference: the default rule.
        const int vec = 16 / int(es);
        const Config base = default_config(OpKind(op), dtype, cols, vec, limits);
        if (run(&base) != XVK_SUCCESS) return std::fprintf(stderr, "default config failed\n"), 1;
        CUDA_OK(cudaMemcpyAsync(ref.p, out.p, n * es, cudaMemcpyDeviceToDevice, g_stream));
        CUDA_OK(cudaMemcpyAsync(dgamma_ref.p, dgamma.p, size_t(cols) * es, cudaMemcpyDeviceToDevice, g_stream));
        const double tol = dtype == 0 ? 1e-5 : dtype == 1 ? 2e-3 : 1.6e-2;
        Config best = base;
        double best_us = 1e30, base_us = 0;
        std::vector<std::pair<double, Config>> timed;  // every accepted candidate's first time
        for (const Config &c : candidate_configs(OpKind(op), dtype, cols, vec, limits)) {
          CUDA_OK(cudaMemsetAsync(out.p, 0xff, n * es, g_stream));
          if (run(&c) != XVK_SUCCESS) {
            cudaGetLastError();
            continue;
          }
          float diff = relative_diff(out.p, ref.p, dtype, n);
          if (op == int(OpKind::kNormBackward) && nb.dgamma) diff = std::max(diff, relative_diff(dgamma.p, dgamma_ref.p, dtype, size_t(cols)));
          if (!(diff <= tol)) {
            std::printf("REJECTED %s %s cols %lld %s: differs from the default by %g\n", kOpNames[op][flavour], kDtypeNames[dtype],
                        (long long)cols, config_name(c).c_str(), diff);
            ++rejected;
            continue;
          }
          const double us = time_us([&] { run(&c); });
          if (every)
            std::printf("  %-20s %-8s rows %6lld cols %6lld: %-40s %9.2f us\n", kOpNames[op][flavour], kDtypeNames[dtype],
                        (long long)rows, (long long)cols, config_name(c).c_str(), us);
          if (c.variant == base.variant && c.group == base.group && c.packs == base.packs && c.rows == base.rows &&
              c.threads == base.threads && c.blocks_per_sm == base.blocks_per_sm)
            base_us = us;
          timed.emplace_back(us, c);
          if (us < best_us) best_us = us, best = c;
        }
        // The candidates within kFinalMargin of the fastest (at most
        // kFinalists) are timed kFinalRounds times more, in turns, and the one
        // with the lowest of its times wins: one median of 15 launches
        // differs run to run by 1-2% on short kernels, so the first sweep's
        // order among near-ties was partly noise (an H200 table from it
        // picked configurations up to 6% slower than the H100's in a same-run
        // A/B, bench/results/h200-2026-11-29-rows-h200-table.txt).
        constexpr double kFinalMargin = 1.04;
        constexpr int kFinalists = 4, kFinalRounds = 2;
        std::sort(timed.begin(), timed.end(), [](const auto &l, const auto &r) { return l.first < r.first; });
        while (timed.size() > size_t(kFinalists) || (!timed.empty() && timed.back().first > best_us * kFinalMargin))
          timed.pop_back();
        if (timed.size() > 1) {
          for (int round = 0; round < kFinalRounds; ++round)
            for (auto &finalist : timed) {
              const Config c = finalist.second;
              finalist.first = std::min(finalist.first, time_us([&] { run(&c); }));
            }
          const auto winner = std::min_element(timed.begin(), timed.end(),
                                               [](const auto &l, const auto &r) { return l.first < r.first; });
          best_us = winner->first, best = winner->second;
          if (every) std::printf("  finalists %zu: best %s %.2f us\n", timed.size(), config_name(best).c_str(), best_us);
        }
        std::printf("%-20s %-8s rows %6lld cols %6lld: best %-40s %9.2f us (default rule %9.2f us)\n", kOpNames[op][flavour],
                    kDtypeNames[dtype], (long long)rows, (long long)cols, config_name(best).c_str(), best_us, base_us);
        std::fflush(stdout);
        char line[256];
        std::snprintf(line, sizeof line, "    {%d, %d, %d, %s, %lld, %d, %d, %d, %d, %d, %d},  // %s %s %lld x %lld: %.2f us (default rule %.2f)\n",
                      op, flavour, dtype, rows_bound == INT64_MAX ? "INT64_MAX" : std::to_string(rows_bound).c_str(), (long long)cols,
                      int(best.variant), best.group, best.rows, best.packs, best.threads, best.blocks_per_sm, kOpNames[op][flavour],
                      kDtypeNames[dtype], (long long)rows, (long long)cols, best_us, base_us);
        table += line;
        ++entries;
      }
  const time_t now = time(nullptr);
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  char head[1024];
  std::snprintf(head, sizeof head,
                "// %s tuning table (%s). Produced by xvk-tune on an %s (%d SMs, %d GB/s peak memory bandwidth) on %s,\n"
                "// rows tuned at 8192 and %lld,\n"
                "// median of %d L2-flushed launches per candidate; do not edit by hand, run\n"
                "// bench/xvk-tune again (see src/cuda/tuning/README.md).\n"
                "// Columns: op (OpKind), flavour (Flavour), dtype (xvk_dtype_id), max_rows, max_cols, variant (Variant), group,\n// rows, packs, threads, blocks_per_sm.\n"
                "#include <cstdint>\n\n#include \"cuda/tuning/tuning.hpp\"\n\nnamespace xvk::gpu {\nnamespace {\n\nconst TuningEntry kEntries[] = {\n",
                ctx.info->arch, tuning_table_key(*ctx.info->table), prop.name, prop.multiProcessorCount, ctx.info->memory_gbps,
                date, (long long)max_rows, g_reps);
  // The definition the device's table has (tuning.cpp's list, chosen by
  // architecture and memory bandwidth; XVK_TUNING_TABLE names another).
  const std::string symbol = tuning_table_symbol(*ctx.info->table);
  if (symbol == tuning_table_symbol(tuning_table_for("")))
    std::fprintf(stderr, "xvk-tune: %s has no table of its own; add a row to kArchTables (tuning.cpp) and name "
                 "the definition there\n", ctx.info->arch);
  std::string file = std::string(head) + table + "};\n\n}  // namespace\n\nextern const TuningTable " + symbol + ";\n" +
                     "extern const BatchNormTuning kBatchNormSm90;  // sm90_batch_norm.cpp\n" +
                     "const TuningTable " + symbol + " = {\"" + ctx.info->arch + ": tuned on " + prop.name + ", " + date +
                     "\", kEntries, " + std::to_string(entries) + ", &kBatchNormSm90};\n\n}  // namespace xvk::gpu\n";
  if (only_op >= 0 && out_path) {
    // Replace the operator's rows of the existing table, in place.
    std::string line, merged;
    const std::string row_prefix = "    {" + std::to_string(only_op) + ", ";
    const std::string note = "// OpKind " + std::to_string(only_op) + " rows re-tuned alone (xvk-tune --op " +
                             std::to_string(only_op) + ") on an " + prop.name + " on " + date + ".\n";
    const std::string note_prefix = note.substr(0, note.find(" on an "));
    int replaced = 0;
    bool inserted = false, noted = false;
    for (size_t pos = 0; pos < old_file.size();) {
      const size_t end = old_file.find('\n', pos);
      line = old_file.substr(pos, end == std::string::npos ? std::string::npos : end + 1 - pos);
      pos = end == std::string::npos ? old_file.size() : end + 1;
      if (line.rfind(note_prefix, 0) == 0) continue;  // an earlier note for this operator
      if (!noted && line.rfind("#include", 0) == 0) merged += note, noted = true;
      if (line.rfind(row_prefix, 0) == 0) {
        ++replaced;
        if (!inserted) merged += table, inserted = true;
        continue;
      }
      merged += line;
    }
    if (replaced != entries)
      return std::fprintf(stderr, "xvk-tune: %s has %d rows of op %d, this run %d: not replaced\n", out_path, replaced,
                          only_op, entries), 2;
    if (!write_file(out_path, merged)) return 2;
    std::printf("replaced %d rows of op %d in %s (%d candidates rejected)\n", replaced, only_op, out_path, rejected);
  } else if (only_op >= 0) {
    std::printf("(--op without --out: no table written; %d candidates rejected)\n", rejected);
  } else if (out_path) {
    if (!write_file(out_path, file)) return 2;
    std::printf("wrote %s (%d entries, %d candidates rejected)\n", out_path, entries, rejected);
  } else {
    std::fputs(file.c_str(), stdout);
  }
  return rejected == 0 ? 0 : 3;
}
