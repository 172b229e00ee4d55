#!/usr/bin/env bash
# Builds the cuda preset on a GPU machine and runs the chosen stages, writing
# logs and CSVs to $OUT (or ./gpu-out). Stages, in the order given:
#   build      configure and build (sm_90 only, unless CUDA_ARCHS is set)
#   demo       xvk-demo on the best backend
#   test       every suite through ctest (bindings and packaging need Debian's tools)
#   gputest    the GPU suite alone (ctest -L gpu)
#   sanitize   the GPU suite and the variant suite (XVK_TEST_QUICK=1) under compute-sanitizer memcheck and racecheck
#   tune       xvk-tune, writing the GPU's table (src/cuda/tuning/sm90.cpp, or sm90_h200.cpp for 4 TB/s and more), then rebuild
#   bench      xvk-bench and bench/torch_bench.py, joined by bench/compare.py
#   quickbench the same on a few shapes
#   bnbench    BatchNorm: xvk-bench --batch-norm, bench/torch_bench.py --batch-norm (eager, relu backward
#              alone, torch.compile within BN_COMPILE_BUDGET seconds, default 110), joined by
#              bench/compare_batch_norm.py; about 4 minutes on an H100. BN_REPS (default 50) and
#              BN_BIG_REPS (default BN_REPS: shapes of >= 100M elements) set the launches per case (>= 20)
#   quickbnbench the same on two shapes
#   bntest     the BatchNorm GPU suite six times: single-pass as tuned, forced on, forced off, each with pass 2's
#              last-use loads as tuned and forced off (XVK_BATCH_NORM_LAST_USE=0); then twice more with pass 2's
#              staging forced on and off (XVK_BATCH_NORM_STAGE=1, =0), and once with the channels-first gradient
#              sums by columns instead of by spans (XVK_BATCH_NORM_SPANS=0), and twice with the held single pass
#              forced, holding nothing and 16 KiB a block (XVK_BATCH_NORM_HELD_KIB=0, =16), and once with the
#              channels-first channel-group forward forced (XVK_BATCH_NORM_GROUPS=1) and its streamed form forced
#              (XVK_BATCH_NORM_GROUPS=2)
#   bnsanitize the BatchNorm GPU suite under compute-sanitizer memcheck and racecheck
#   l2ahead    the wide-row forwards with the block kernels' next-row L2 request as the rule says and forced
#              off (XVK_L2_ROW_AHEAD=0), alternated twice; times side by side
#   bnprofile  ncu per-kernel times and DRAM bytes of the BatchNorm kernels on one shape (BN_PROFILE_SHAPE,
#              default 256x256x56x56; BN_PROFILE_OPS, default bn_relu_fwd,bn_relu_bwd), summarised by bench/ncu_summary.py
#   bnsinglepass  the single-pass (cooperative) training forward against the two-pass one (XVK_BATCH_NORM_SINGLE_PASS)
#   rowkernels ncu per-kernel times and DRAM bytes (every kernel of the op, the parameter-gradient
#              finalize included) for each case in ROW_PROFILE_CASES, summarised by bench/ncu_summary.py
#   rowprofile ncu (--set full) on one launch of each softmax/norm case in ROW_PROFILE_CASES (OP:DTYPE:ROWSxCOLS,
#              space-separated), reports in $OUT/ncu-*.txt, a few headline metrics printed
#   rowcounts  ncu source counters on one launch of each case in ROW_PROFILE_CASES: executed instructions per
#              SASS instruction to $OUT/sass-counts-CASE.csv, summarised per opcode and element by bench/sass_counts.py
#   python     the Python binding's tests with the machine's python3 (PyTorch CUDA tensors included)
#   sass       cuobjdump -sass of the kernels of src/cuda/$SASS_OBJECT.cu (default softmax) whose demangled
#              names match the awk regex SASS_KERNELS (default: all), to $OUT/sass-OBJECT.txt (no GPU needed)
#   fingerprint  prints a hash of src/ and include/ (also written to gpu.txt by build), no GPU needed
# Packages the machine lacks (dlpack and doctest headers and CMake files) can
# be carried in .devdeps (include/, lib/cmake/), used as a CMake prefix.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=build/gpu
# Per-kernel time and DRAM traffic (bnprofile, rowkernels; read by bench/ncu_summary.py).
NCU_TIME_METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
# ncu saves and restores every device allocation around each replayed launch: the benchmarks'
# arena (bench/bench_util.cuh), all free memory by default, is capped under it.
NCU_ENV=(env XVK_BENCH_ARENA_MIB="${XVK_BENCH_ARENA_MIB:-16384}")
log() { printf '\n=== %s (%ss) ===\n' "$1" "$SECONDS"; }
# A file name for a case OP:DTYPE:ROWSxCOLS (the op names hold x's too: only the last one goes).
case_file_name() { local n=${1//:/-}; echo "${n%x*}-${n##*x}"; }
# sha256 over the contents of src/ and include/ (path order): matches a GPU run to a commit.
source_fingerprint() { find src include -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16; }
for stage in "$@"; do
  case $stage in
    build)
      log build
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
      # The device tool copies the working tree but not always a current .git, so HEAD there can
      # be stale: name the sources by content too (the fingerprint stage prints the same line).
      echo "git HEAD as seen here: $(git rev-parse HEAD 2>/dev/null)" | tee -a "$OUT/gpu.txt"
      echo "sources: $(source_fingerprint)" | tee -a "$OUT/gpu.txt"
      extra=()
      [ -d .devdeps ] && extra+=(-DCMAKE_PREFIX_PATH=$PWD/.devdeps -Ddoctest_DIR=$PWD/.devdeps/lib/cmake/doctest -DXVK_DLPACK_INCLUDE_DIR=$PWD/.devdeps/include)
      cmake --preset cuda -B $BUILD -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "${extra[@]}" >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
      cmake --build $BUILD -j 16 >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; exit 1; }
      echo "built" ;;
    demo)
      log demo
      $BUILD/bin/xvk-demo 2>&1 | tee "$OUT/demo.log" ;;
    test)
      log test
      (cd $BUILD && ctest --output-on-failure -j 4 2>&1) | tee "$OUT/ctest.log" | tail -40 ;;
    gputest)
      log gputest
      (cd $BUILD && ctest --output-on-failure -L gpu 2>&1) | tee "$OUT/ctest-gpu.log" | tail -15 ;;
    sanitize)
      log sanitize
      for tool in memcheck racecheck; do
        XVK_TEST_QUICK=1 XVK_BACKEND_PATH=$PWD/$BUILD/lib timeout 230 compute-sanitizer --tool $tool --error-exitcode 9 \
          $BUILD/bin/test_gpu_ops --test-case-exclude='*2^31*,*65535*' >"$OUT/sanitizer-$tool.log" 2>&1
        echo "$tool exit $?"; tail -4 "$OUT/sanitizer-$tool.log"
        XVK_TEST_QUICK=1 timeout 400 compute-sanitizer --tool $tool --error-exitcode 9 \
          $BUILD/bin/test_gpu_variants >"$OUT/sanitizer-variants-$tool.log" 2>&1
        echo "variants $tool exit $?"; tail -4 "$OUT/sanitizer-variants-$tool.log"
      done ;;
    bntest)
      # The BatchNorm GPU suite as the tuning table picks, then with the single-pass forward forced
      # wherever it can run (=1) and forbidden (=0), so both forward paths are tested whatever the table says;
      # each also with pass 2's last-use loads off (the table turns them on for the suite's small tensors).
      log bntest
      for lu in "" 0; do for v in "" 1 0; do
        log_file="$OUT/bn-test${v:+-singlepass-$v}${lu:+-lastuse-$lu}.log"
        XVK_BATCH_NORM_LAST_USE=$lu XVK_BATCH_NORM_SINGLE_PASS=$v XVK_BACKEND_PATH=$PWD/$BUILD/lib \
          $BUILD/bin/test_gpu_batch_norm >"$log_file" 2>&1
        echo "XVK_BATCH_NORM_SINGLE_PASS=${v:-unset} XVK_BATCH_NORM_LAST_USE=${lu:-unset} exit $?"; tail -3 "$log_file"
      done; done
      for st in 1 0; do
        log_file="$OUT/bn-test-stage-$st.log"
        XVK_BATCH_NORM_STAGE=$st XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/test_gpu_batch_norm >"$log_file" 2>&1
        echo "XVK_BATCH_NORM_STAGE=$st exit $?"; tail -3 "$log_file"
      done
      XVK_BATCH_NORM_SPANS=0 XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/test_gpu_batch_norm >"$OUT/bn-test-spans-0.log" 2>&1
      echo "XVK_BATCH_NORM_SPANS=0 exit $?"; tail -3 "$OUT/bn-test-spans-0.log"
      # The held single pass on every channels-last case it takes, re-reading all of its rows (0 KiB
      # held) and all but the first 16 KiB a block.
      for kib in 0 16; do
        log_file="$OUT/bn-test-held-$kib.log"
        XVK_BATCH_NORM_SINGLE_PASS=1 XVK_BATCH_NORM_HELD_KIB=$kib XVK_BACKEND_PATH=$PWD/$BUILD/lib \
          $BUILD/bin/test_gpu_batch_norm >"$log_file" 2>&1
        echo "XVK_BATCH_NORM_SINGLE_PASS=1 XVK_BATCH_NORM_HELD_KIB=$kib exit $?"; tail -3 "$log_file"
      done
      # The channel-group forward on every channels-first case it takes (the cooperative single pass
      # takes some of them under XVK_BATCH_NORM_SINGLE_PASS=1), then its streamed form (16-bit without z).
      for g in 1 2; do
        XVK_BATCH_NORM_GROUPS=$g XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/test_gpu_batch_norm >"$OUT/bn-test-groups-$g.log" 2>&1
        echo "XVK_BATCH_NORM_GROUPS=$g exit $?"; tail -3 "$OUT/bn-test-groups-$g.log"
      done ;;
    bnsanitize)
      log bnsanitize
      for tool in memcheck racecheck; do
        XVK_TEST_QUICK=1 XVK_BACKEND_PATH=$PWD/$BUILD/lib timeout 280 compute-sanitizer --tool $tool --error-exitcode 9 \
          $BUILD/bin/test_gpu_batch_norm --test-case-exclude='*2^31*' >"$OUT/sanitizer-bn-$tool.log" 2>&1
        echo "$tool exit $?"; tail -4 "$OUT/sanitizer-bn-$tool.log"
      done ;;
    tune)
      log tune
      # The table this GPU takes (its key in the file's first line): sm90.cpp or sm90_h200.cpp.
      $BUILD/bin/xvk-tune --out "$OUT/tuned-table.cpp" 2>&1 | tee "$OUT/tune.log" | tail -5
      key=$(sed -n '1s/^.*tuning table (\([^)]*\)).*$/\1/p' "$OUT/tuned-table.cpp")
      case $key in
        sm_90) cp "$OUT/tuned-table.cpp" src/cuda/tuning/sm90.cpp ;;
        sm_90-h200) cp "$OUT/tuned-table.cpp" src/cuda/tuning/sm90_h200.cpp ;;
        *) echo "tune: no table file for '$key' (see kArchTables in src/cuda/tuning/tuning.cpp)"; exit 1 ;;
      esac
      cmake --build $BUILD -j 16 >>"$OUT/build.log" 2>&1 || exit 1 ;;
    bench|quickbench)
      log $stage
      q=(); [ $stage = quickbench ] && q=(--quick)
      XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/xvk-bench "${q[@]}" --csv "$OUT/xvk-bench.csv" >"$OUT/xvk-bench.log" 2>&1 || { tail "$OUT/xvk-bench.log"; exit 1; }
      head -8 "$OUT/xvk-bench.log"
      python3 bench/torch_bench.py "${q[@]}" --csv "$OUT/torch-bench.csv" >"$OUT/torch-bench.log" 2>&1 || tail "$OUT/torch-bench.log"
      head -4 "$OUT/torch-bench.log"
      python3 bench/compare.py "$OUT/xvk-bench.csv" "$OUT/torch-bench.csv" --out "$OUT/compare.txt" | tail -60 ;;
    bnbench|quickbnbench)
      log $stage
      q=(); [ $stage = quickbnbench ] && q=(--quick)
      reps=(--reps "${BN_REPS:-50}" --big-reps "${BN_BIG_REPS:-${BN_REPS:-50}}")
      t0=$SECONDS
      XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/xvk-bench --batch-norm "${q[@]}" "${reps[@]}" \
        --csv "$OUT/xvk-bn-bench.csv" >"$OUT/xvk-bn-bench.log" 2>&1 || { echo "xvk-bench --batch-norm failed:"; tail -20 "$OUT/xvk-bn-bench.log"; }
      echo "xvk-bench --batch-norm: $((SECONDS - t0)) s"; grep -E "^(device|reps)" "$OUT/xvk-bn-bench.log"
      sed -n '/geometric mean over/,$p' "$OUT/xvk-bn-bench.log"
      t0=$SECONDS
      python3 bench/torch_bench.py --batch-norm "${q[@]}" "${reps[@]}" --compile-budget "${BN_COMPILE_BUDGET:-110}" --kernels \
        --csv "$OUT/torch-bn-bench.csv" >"$OUT/torch-bn-bench.log" 2>&1 || { echo "torch_bench.py --batch-norm failed:"; tail -20 "$OUT/torch-bn-bench.log"; }
      echo "torch_bench.py --batch-norm: $((SECONDS - t0)) s"; grep -E "^(torch |reps|eager phase|compile phase)" "$OUT/torch-bn-bench.log"
      python3 bench/compare_batch_norm.py "$OUT/xvk-bn-bench.csv" "$OUT/torch-bn-bench.csv" --out "$OUT/compare-bn.txt" \
        | sed -n '/^Geometric means per op/,$p' | head -60 ;;
    bnsinglepass)
      # The single-pass (cooperative) training forward against the two-pass one on the small shapes.
      log bnsinglepass
      for v in 0 1; do
        XVK_BATCH_NORM_SINGLE_PASS=$v XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/xvk-bench --batch-norm --quick \
          --only bn_relu_fwd,bn_add_relu_fwd --csv "$OUT/xvk-bn-singlepass-$v.csv" >"$OUT/xvk-bn-singlepass-$v.log" 2>&1
        echo "XVK_BATCH_NORM_SINGLE_PASS=$v exit $?"; grep -E "bn_(add_)?relu_fwd" "$OUT/xvk-bn-singlepass-$v.log" | head -30
      done ;;
    l2ahead)
      log l2ahead
      cases=()
      for op in softmax_fwd log_softmax_fwd layer_norm_fwd rms_norm_fwd; do for dt in fp32 fp16 bf16; do
        for shape in 49152x8192 49152x16384 49152x32768 8192x8192; do cases+=(--case "$op:$dt:$shape"); done; done; done
      for rep in 1 2; do for v in rule 0; do
        XVK_L2_ROW_AHEAD=${v#rule} XVK_BACKEND_PATH=$PWD/$BUILD/lib $BUILD/bin/xvk-bench "${cases[@]}" \
          --csv "$OUT/xvk-l2ahead-$v-$rep.csv" >"$OUT/xvk-l2ahead-$v-$rep.log" 2>&1 || tail -3 "$OUT/xvk-l2ahead-$v-$rep.log"
      done; done
      # The second run of each, side by side (awk: the device image has no column(1)).
      paste -d' ' <(sed -n '/^op /,$p' "$OUT/xvk-l2ahead-rule-2.log" | awk 'NF >= 8 {print $1, $2, $3, $4, $5, $6}') \
        <(sed -n '/^op /,$p' "$OUT/xvk-l2ahead-0-2.log" | awk 'NF >= 8 {print $6}') |
        awk 'NR == 1 {$6 = "rule_us"; $7 = "off_us"} {printf "%-16s %-5s %6s %6s %-22s %10s %10s\n", $1, $2, $3, $4, $5, $6, $7}' ;;
    bnprofile)
      log bnprofile
      XVK_BACKEND_PATH=$PWD/$BUILD/lib "${NCU_ENV[@]}" timeout 300 ncu --clock-control none --csv \
        -k 'regex:reduce_|apply|finalize|single_pass|inference_coef' \
        --metrics $NCU_TIME_METRICS \
        $BUILD/bin/xvk-bench --batch-norm --reps 20 --shape "${BN_PROFILE_SHAPE:-256x256x56x56}" \
        --only "${BN_PROFILE_OPS:-bn_relu_fwd,bn_relu_bwd}" --csv "$OUT/xvk-bn-profiled.csv" >"$OUT/ncu-bn.csv" 2>"$OUT/ncu-bn.err"
      echo "ncu exit $?"; tail -3 "$OUT/ncu-bn.err"
      python3 bench/ncu_summary.py "$OUT/ncu-bn.csv" | tee "$OUT/ncu-bn-summary.txt" | cut -c1-170 | head -40 ;;
    rowkernels)
      log rowkernels
      for c in ${ROW_PROFILE_CASES:-layer_norm_bwd:fp16:49152x1024 layer_norm_bwd:fp32:49152x1024}; do
        csvf="$OUT/ncu-kernels-$(case_file_name "$c").csv"
        XVK_BACKEND_PATH=$PWD/$BUILD/lib "${NCU_ENV[@]}" timeout 120 ncu --clock-control none --csv -k 'regex:(softmax|norm)_' \
          --metrics $NCU_TIME_METRICS \
          $BUILD/bin/xvk-bench --reps 10 --case "$c" --csv /dev/null >"$csvf" 2>"$OUT/ncu-kernels.err"
        echo "$c: ncu exit $?"
        python3 bench/ncu_summary.py "$csvf" | cut -c1-170 | head -12
      done ;;
    rowprofile)
      log rowprofile
      for c in ${ROW_PROFILE_CASES:-softmax_fwd:fp16:49152x1024 layer_norm_fwd:fp16:49152x1024}; do
        report="$OUT/ncu-$(case_file_name "$c").txt"
        XVK_BACKEND_PATH=$PWD/$BUILD/lib "${NCU_ENV[@]}" timeout 200 ncu --set full -k 'regex:(softmax|norm)_(forward|backward)' \
          --metrics "$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' long_scoreboard barrier short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle no_instruction not_selected selected drain membar dispatch_stall | sed 's/,$//')" \
          --launch-skip 5 --launch-count 1 $BUILD/bin/xvk-bench --reps 10 --case "$c" --csv /dev/null >"$report" 2>&1
        echo "$c: ncu exit $?"
        grep -E "^  [a-z_]+_(forward|backward)|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Eligible Warps Per|issue_stalled" "$report" | head -32
      done ;;
    rowcounts)
      log rowcounts
      for c in ${ROW_PROFILE_CASES:-layer_norm_fwd:fp16:8192x8192}; do
        name=$(case_file_name "$c") shape=${c##*:}
        XVK_BACKEND_PATH=$PWD/$BUILD/lib "${NCU_ENV[@]}" timeout 200 ncu --set full --import-source no -k 'regex:(softmax|norm)_(forward|backward)' \
          --launch-skip 5 --launch-count 1 -o "$OUT/ncu-$name" $BUILD/bin/xvk-bench --reps 10 --case "$c" --csv /dev/null \
          >"$OUT/ncu-$name.log" 2>&1
        echo "$c: ncu exit $?"
        ncu -i "$OUT/ncu-$name.ncu-rep" --page source --csv --print-source sass >"$OUT/sass-counts-$name.csv" &&
          python3 bench/sass_counts.py "$OUT/sass-counts-$name.csv" "${shape%x*}" "${shape#*x}" >"$OUT/sass-counts-$name.txt" &&
          head -24 "$OUT/sass-counts-$name.txt"
        rm -f "$OUT/ncu-$name.ncu-rep"  # large; the CSV keeps what the summary reads
      done ;;
    python)
      log python
      LD_LIBRARY_PATH=$PWD/$BUILD/lib XVK_BACKEND_PATH=$PWD/$BUILD/lib PYTHONPATH=$PWD/bindings/python \
        PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -v -p no:cacheprovider bindings/python/tests 2>&1 | tee "$OUT/python.log" | tail -25 ;;
    sass)
      log sass
      obj=${SASS_OBJECT:-softmax}
      cuobjdump -sass "$BUILD/src/cuda/CMakeFiles/xvk_cuda_kernels.dir/$obj.cu.o" | c++filt |
        awk -v re="${SASS_KERNELS:-.}" '/Function : /{keep = ($0 ~ re)} keep' >"$OUT/sass-$obj.txt"
      echo "$(grep -c 'Function : ' "$OUT/sass-$obj.txt") kernels to $OUT/sass-$obj.txt" ;;
    fingerprint)
      # No GPU needed: run it on a checkout to compare with the "sources:" line of a run's gpu.txt.
      echo "sources: $(source_fingerprint)" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
log done
