#!/bin/sh
# Usage: disassemble.sh [--check] OBJ_DIR OUT_DIR
#
# Reads the AMD code objects out of the hipcc objects in OBJ_DIR (softmax.o,
# norms.o, batch_norm.o; build/hip/src/hip/hip with the hip preset),
# disassembles them and
# writes to OUT_DIR:
#   <obj>.<target>.co     the code object of each target (an AMDGPU ELF)
#   <obj>.<target>.s      its whole disassembly, names demangled
#   resources.txt         per target: kernels, wavefront size, registers, spills
#   excerpts.md           for one kernel per variant on gfx90a (and two on
#                         gfx1030): resources, cross-lane instructions, 16-byte
#                         accesses, and the first instructions of each kind
# src/hip/DISASSEMBLY.md quotes excerpts.md. With --check it also fails when
#   - a kernel's wavefront size is not 64 on gfx9* targets or 32 on gfx10*,
#   - a chosen reduction kernel has no cross-lane instruction,
#   - a chosen kernel has no 16-byte global load,
#   - a chosen streaming kernel uses scratch memory,
#   - any kernel reads memory through flat_load_* (see load_global in
#     src/cuda/portability.cuh).
# Tools (override through the environment): OBJCOPY (objcopy),
# OFFLOAD_BUNDLER (clang-offload-bundler-15), LLVM_OBJDUMP (llvm-objdump-15),
# LLVM_READELF (llvm-readelf-15), LLVM_CXXFILT (llvm-cxxfilt-15); XVK_HIPCC
# (hipcc) only names the compiler in excerpts.md.
set -eu

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
[ $# -eq 2 ] || { echo "usage: $0 [--check] OBJ_DIR OUT_DIR" >&2; exit 2; }
obj_dir=$1
out=$2
OBJCOPY=${OBJCOPY:-objcopy}
OFFLOAD_BUNDLER=${OFFLOAD_BUNDLER:-clang-offload-bundler-15}
LLVM_OBJDUMP=${LLVM_OBJDUMP:-llvm-objdump-15}
LLVM_READELF=${LLVM_READELF:-llvm-readelf-15}
LLVM_CXXFILT=${LLVM_CXXFILT:-llvm-cxxfilt-15}
mkdir -p "$out"
status=0
problem() { echo "CHECK FAILED: $*" >&2; status=1; }

# 1. Code objects and disassembly. hipcc puts a clang offload bundle (host
# entry plus one code object per --offload-arch) into the .hip_fatbin section.
targets=""
for name in softmax norms batch_norm; do
  o=$obj_dir/$name.o
  [ -f "$o" ] || { echo "missing $o: build the hip preset first" >&2; exit 1; }
  "$OBJCOPY" -O binary --only-section=.hip_fatbin "$o" "$out/$name.bundle"
  for entry in $("$OFFLOAD_BUNDLER" --list --type=o --input="$out/$name.bundle"); do
    case $entry in hipv4-amdgcn-amd-amdhsa--*) ;; *) continue ;; esac
    target=${entry#hipv4-amdgcn-amd-amdhsa--}
    case " $targets " in *" $target "*) ;; *) targets="$targets $target" ;; esac
    co=$out/$name.$target.co
    "$OFFLOAD_BUNDLER" --unbundle --type=o --input="$out/$name.bundle" --targets="$entry" --output="$co"
    "$LLVM_OBJDUMP" -d --demangle --mcpu="$target" "$co" > "$out/$name.$target.s"
    "$LLVM_READELF" --notes "$co" > "$out/$name.$target.notes"
  done
  rm -f "$out/$name.bundle"
done

# Kernel metadata (NT_AMDGPU_METADATA) as one line per kernel:
# name|wavefront|vgpr|agpr|sgpr|vgpr_spill|private_bytes|lds_bytes
kernel_table() {
  awk '
    function flush() { if (name != "") print name "|" wave "|" vgpr "|" agpr "|" sgpr "|" spill "|" priv "|" lds; name = "" }
    /^  - / { flush(); agpr = 0 }
    /^ *-? *\.agpr_count:/ { agpr = $NF }
    /^    \.name:/ { name = $2 }
    /^    \.wavefront_size:/ { wave = $2 }
    /^    \.vgpr_count:/ { vgpr = $2 }
    /^    \.sgpr_count:/ { sgpr = $2 }
    /^    \.vgpr_spill_count:/ { spill = $2 }
    /^    \.private_segment_fixed_size:/ { priv = $2 }
    /^    \.group_segment_fixed_size:/ { lds = $2 }
    END { flush() }' "$1" |
    awk -F'|' '{ printf "%s|%s|%s|%s|%s|%s|%s %s\n", $2, $3, $4, $5, $6, $7, $8, $1 }' | "$LLVM_CXXFILT" |
    awk '{ i = index($0, " "); print substr($0, i + 1) "|" substr($0, 1, i - 1) }'
}

# 2. Resources of every kernel, per target.
{
  echo "Kernel resources per target (from the code objects' AMDGPU metadata)."
  echo "spilling: kernels with VGPRs spilled (into AGPRs on gfx908/gfx90a/gfx940 when scratch is 0, else to"
  echo "scratch memory); on gfx90a/gfx940 the VGPR count is of the unified file, AGPRs included."
  for target in $(printf '%s\n' $targets | sort); do
    for name in softmax norms batch_norm; do
      [ -f "$out/$name.$target.notes" ] || continue
      kernel_table "$out/$name.$target.notes" > "$out/$name.$target.kernels"
      awk -F'|' -v t="$target" -v f="$name" '
        { n++; if ($3 > maxv) maxv = $3; if ($4 > maxa) maxa = $4; if ($6 > 0) sp++; if ($7 > 0) sc++; waves[$2]++ }
        END { w = ""; for (k in waves) w = w " " k "x" waves[k]
              printf "%-8s %-8s kernels %3d  wavefront%s  max VGPRs %3d  max AGPRs %3d  spilling %2d  using scratch %2d\n", t, f, n, w, maxv, maxa + 0, sp + 0, sc + 0 }' \
        "$out/$name.$target.kernels"
      if [ $check = 1 ]; then
        case $target in gfx9*) want=64 ;; gfx10*|gfx11*) want=32 ;; *) want="" ;; esac
        if [ -n "$want" ] && awk -F'|' -v w="$want" '$2 != w { bad = 1 } END { exit !bad }' "$out/$name.$target.kernels"; then
          problem "$name.o $target: a kernel's wavefront size is not $want"
        fi
        if grep -q 'flat_load' "$out/$name.$target.s"; then
          problem "$name.o $target: flat_load_* in $(grep -c flat_load "$out/$name.$target.s") places"
        fi
      fi
    done
    for name in softmax norms batch_norm; do
      [ -f "$out/$name.$target.kernels" ] || continue
      awk -F'|' -v t="$target" '$6 > 0 || $7 > 0 { printf "  %s spills %s, scratch %s bytes: %s\n", t, $6, $7, $1 }' "$out/$name.$target.kernels"
    done
  done
} > "$out/resources.txt"

# 3. Excerpts. The cross-lane instructions of AMD GPUs: ds_bpermute/ds_permute
# and ds_swizzle (through the LDS crossbar, no LDS memory), DPP modifiers
# (row_*, quad_perm, row_bcast, wave_*), v_readlane/v_writelane, v_permlane*.
# (v_readfirstlane, which moves a uniform value to a scalar register, is not
# a reduction and is counted apart.)
xlane='ds_bpermute_b32|ds_permute_b32|ds_swizzle_b32|v_readlane_b32|v_writelane_b32|v_permlane|row_|quad_perm|wave_sh|wave_ro|row_bcast'
wide='(global|buffer)_(load|store)_dwordx4'

# kernel_body FILE.s NAME-PREFIX: the instructions of the first kernel whose
# demangled name starts with NAME-PREFIX, without addresses and encodings.
kernel_body() {
  awk -v want="$2" '
    /^[0-9a-f]+ <.*>:$/ { if (on) exit; line = $0; sub(/^[0-9a-f]+ </, "", line); sub(/ *>:$/, "", line)
                          if (index(line, want) == 1) { on = 1; print "#name " line }; next }
    on && /^\t/ { sub(/[ \t]*\/\/ [0-9A-F]+:.*$/, ""); sub(/^\t/, ""); print }' "$1"
}

# tally: "mnemonic xN, ..." of the instructions on stdin.
tally() {
  awk '{ m = $1; if ($0 ~ /row_|quad_perm|wave_sh|wave_ro|row_bcast/) m = m " (DPP)"; if (!(m in c)) order[++n] = m; c[m]++ }
       END { for (i = 1; i <= n; i++) printf "%s%s x%d", (i > 1 ? ", " : ""), order[i], c[order[i]] }'
}

# excerpt FILE TARGET NAME-PREFIX TITLE KIND [ANCHOR]: one kernel's summary and
# code. KIND reduce: the lane-index setup of the shuffles and the first
# reduction chain (after the first instruction matching ANCHOR, if given);
# KIND lds: the partial sums' way through LDS; KIND stream: its first 16-byte
# loads and stores (an elementwise pass).
excerpt() {
  file=$1 target=$2 prefix=$3 title=$4 kind=$5 anchor=${6:-}
  s=$out/$file.$target.s
  body=$(kernel_body "$s" "$prefix")
  if [ -z "$body" ]; then problem "no kernel $prefix in $file.o for $target"; return; fi
  fullname=$(printf '%s\n' "$body" | sed -n 's/^#name //p')
  insns=$(printf '%s\n' "$body" | grep -v '^#name')
  meta=$(awk -F'|' -v n="$fullname" '$1 == n' "$out/$file.$target.kernels")
  counts=$(printf '%s\n' "$insns" | grep -E "$xlane" | tally)
  firstlane=$(printf '%s\n' "$insns" | grep -c '^v_readfirstlane_b32' || true)
  wides=$(printf '%s\n' "$insns" | grep -E "^$wide" | tally)
  narrow=$(printf '%s\n' "$insns" | grep -E '^(global|buffer)_load_(dword|ushort|short)' | grep -vE 'dwordx[234]' | tally)
  flat=$(printf '%s\n' "$insns" | grep -E '^flat_(load|store)' | tally)
  lds=$(printf '%s\n' "$insns" | grep -cE '^ds_(write|read)' || true)
  bar=$(printf '%s\n' "$insns" | grep -c '^s_barrier' || true)
  lane=$(printf '%s\n' "$insns" | grep -oE '^v_mbcnt_(lo|hi)_u32_b32' | sort -u | tr '\n' ' ')
  lanemask=$(printf '%s\n' "$insns" | grep -m1 -E '^v_and_b32_e32 v[0-9]+, (31|63), v0$' || true)
  echo "### $title: $target"
  echo
  echo "\`$fullname\` (src/cuda/$file.cu), $(printf '%s\n' "$insns" | wc -l) instructions"
  echo
  printf '%s\n' "$meta" | awk -F'|' '{ printf "- wavefront %s lanes; %s VGPRs, %s AGPRs, %s SGPRs; %s VGPRs spilled; %s bytes of scratch; %s bytes of LDS\n", $2, $3, $4, $5, $6, $7, $8 }'
  echo "- cross-lane: ${counts:-none} (and v_readfirstlane_b32 x$firstlane for uniform values)"
  echo "- shuffle lane id from: ${lane:-none}; lane_id() = threadIdx.x & (kWarpSize - 1): ${lanemask:-not in this kernel}"
  echo "- 16-byte accesses: ${wides:-none}${narrow:+; narrower loads: $narrow}${flat:+; flat: $flat}"
  echo "- LDS reads/writes: $lds; barriers: $bar; exec-mask ops: $(printf '%s\n' "$insns" | grep -oE '^s_(and|or|andn2|xor)_saveexec_b(32|64)' | sort -u | tr '\n' ' ')"
  echo
  echo '```'
  if [ "$kind" = reduce ]; then
    # The lane-index setup (HIP's __shfl_xor: lane id from v_mbcnt, partner
    # = lane ^ offset, byte address = partner << 2), then 24 instructions
    # from the first ds_bpermute: a reduction's exchanges and combines.
    at=1 lo=1 hi=1000000
    if [ -n "$anchor" ]; then
      at=$(printf '%s\n' "$insns" | grep -nE -m1 "$anchor" | cut -d: -f1)
      lo=$((at - 16)) hi=$((at + 8))
    fi
    printf '%s\n' "$insns" | awk -v lo="$lo" -v hi="$hi" 'NR >= lo && NR <= hi && /^v_mbcnt_(lo|hi)_u32_b32|^v_xor_b32_e32 v[0-9]+, (1|2|4|8|16|32), v/ && shown < 8 { printf "%5d  %s\n", NR, $0; shown++ }'
    echo "  ..."
    printf '%s\n' "$insns" | awk -v at="$at" 'NR >= at && /^ds_bpermute_b32/ && !from { from = NR } from && NR < from + 24 { printf "%5d  %s\n", NR, $0 }'
  elif [ "$kind" = stream ]; then
    printf '%s\n' "$insns" | awk '/^(global|buffer)_(load|store)_dwordx4/ && shown < 8 { printf "%5d  %s\n", NR, $0; shown++ }'
  else
    # Partials through LDS: the first loads, stores to LDS, the barrier, reads.
    printf '%s\n' "$insns" | awk '/^(global_load|ds_write|ds_read|s_barrier)/ && shown < 14 { printf "%5d  %s\n", NR, $0; shown++ }'
  fi
  if [ "$kind" != stream ]; then  # a stream excerpt shows its 16-byte accesses already
    echo "  ..."
    printf '%s\n' "$insns" | awk '/^(global|buffer)_load_dwordx4/ && shown < 2 { printf "%5d  %s\n", NR, $0; shown++ }'
  fi
  echo '```'
  echo
  [ $check = 1 ] || return 0
  if [ "$kind" != lds ]; then
    printf '%s\n' "$insns" | grep -qE '^(global|buffer)_load_dwordx4' || problem "$title ($target): no 16-byte load"
  fi
  if [ "$kind" = reduce ] && [ -z "$counts" ]; then problem "$title ($target): no cross-lane instruction"; fi
  if [ "$kind" = lds ] && [ "$lds" -eq 0 ]; then problem "$title ($target): no LDS traffic"; fi
  if [ "$kind" = stream ]; then
    printf '%s\n' "$meta" | awk -F'|' '$7 == 0 { ok = 1 } END { exit !ok }' || problem "$title ($target): uses scratch"
  fi
}

{
  echo "# AMD code of libxvk_hip.so: one kernel per variant"
  echo
  echo "Generated by src/hip/disassemble.sh from the hipcc objects; compiler: $("${XVK_HIPCC:-hipcc}" --version 2>/dev/null | grep -m1 -E 'clang version' || echo unknown)."
  echo
  excerpt softmax gfx90a 'void xvk::gpu::(anonymous namespace)::softmax_forward_registers<false, false, float, 4, 1, 32, 1, false>(' \
    "Group registers (softmax forward without masks, float32, a group of 32 lanes per row)" reduce
  excerpt norms gfx90a 'void xvk::gpu::(anonymous namespace)::norm_forward_registers<__half, 8, 1, 0, 1, (xvk::gpu::(anonymous namespace)::AffineForm)1, false, false, false>(' \
    "Block registers (LayerNorm forward, float16, a block per row; gamma and beta in float16, no residual)" reduce
  excerpt softmax gfx90a 'void xvk::gpu::(anonymous namespace)::softmax_forward_reread<false, hip_bfloat16, 8>(' \
    "Reread (softmax forward, bfloat16, a block streams its row twice)" reduce
  excerpt norms gfx90a 'void xvk::gpu::(anonymous namespace)::norm_backward_registers<float, 4, 1, 8, 2, false>(' \
    "Norm backward, group registers (float32, groups of 8 lanes; dgamma/dbeta partials summed across the wavefront)" reduce \
    '^v_xor_b32_e32 v[0-9]+, 32, v' 
  excerpt norms gfx90a 'void xvk::gpu::(anonymous namespace)::norm_backward_finalize<true>(' \
    "Norm backward finalize (dgamma/dbeta from the partials: a column per thread, its lanes' sums added in LDS)" lds
  excerpt batch_norm gfx90a 'void xvk::gpu::(anonymous namespace)::reduce_channels_first<xvk::gpu::(anonymous namespace)::StatsSource<__half, 8>, 8, false>(' \
    "BatchNorm statistics, channels-first (float16; Welford states merged across the wavefront, then the block)" reduce
  excerpt batch_norm gfx90a 'void xvk::gpu::(anonymous namespace)::backward_apply_rows<__half, 8, 2, false, false>(' \
    "BatchNorm backward, rows pass (float16; vectors that straddle two channels, two coefficient sets)" stream
  excerpt softmax gfx1030 'void xvk::gpu::(anonymous namespace)::softmax_forward_registers<false, false, float, 4, 1, 32, 1, false>(' \
    "Group registers on wave32 (the first kernel again)" reduce
  excerpt norms gfx1030 'void xvk::gpu::(anonymous namespace)::norm_backward_registers<float, 4, 1, 8, 2, false>(' \
    "Norm backward on wave32 (the fourth kernel again)" reduce '^v_xor_b32_e32 v[0-9]+, 16, v' 
} > "$out/excerpts.md"

cat "$out/resources.txt"
echo "excerpts: $out/excerpts.md"
if [ $check = 1 ]; then
  [ $status = 0 ] && echo "disassembly checks passed"
fi
exit $status
