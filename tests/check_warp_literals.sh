#!/bin/sh
# Usage: check_warp_literals.sh DIR [EXEMPT_FILE]
#        check_warp_literals.sh --self-test
#
# The kernel source is shared by NVIDIA (warps of 32) and AMD (wavefronts of
# 64 on CDNA, 32 on RDNA), so everything that depends on the warp width must
# go through src/cuda/portability.cuh (kWarpSize, lane_mask_t, kAllLanes,
# shfl_xor, ballot, lane_id, warp_id) on the device and DeviceInfo::warp_size
# on the host. This check scans every .cu/.cuh/.cpp/.hpp/.h file under DIR
# except EXEMPT_FILE (default: DIR/portability.cuh) and fails, naming file,
# line and rule, on any of:
#
#   mask      a 32-bit all-ones lane mask: 0xffffffff (any case or suffix),
#             ~0u, ~0U, ~0ul..., ~uint32_t(0), ~unsigned(0), UINT32_MAX,
#             UINT_MAX, (unsigned)-1. Use kAllLanes (lane_mask_t).
#   intrinsic a vendor warp intrinsic or width used directly: __shfl*,
#             __ballot*, __activemask, __syncwarp, __any*/__all* (_sync or
#             not), __match_*, __reduce_*_sync, __lane_id, warpSize (the
#             device variable; prop.warpSize, the device-properties field
#             the host reads, is fine), __AMDGCN_WAVEFRONT_SIZE,
#             __builtin_amdgcn_*. Use the portability wrappers.
#   width     a literal 32 or 64 inside a shfl_*(...) or ballot(...) call,
#             or as the width of group_all_reduce<...>. Write the width as
#             G or kWarpSize.
#   lanemath  on a line that mentions threadIdx, blockDim, a lane, a warp
#             or threads: "% 32", "/ 32", "& 31", ">> 5" (or 64, 63, 6).
#             Use lane_id(), warp_id(), kWarpSize.
#   shared    a __shared__ array with a dimension of literal 32 or 64
#             (per-warp partials): size it with kMaxWarpsPerBlock.
#   masktype  a ballot() result stored in a 32-bit or int variable: AMD
#             ballots are 64 bits; use lane_mask_t.
#   warpsize  a warp width given as a literal: kWarpSize/warp_size/warpSize
#             compared with or set to 32 or 64, or any name containing
#             "warp" initialised with 32 or 64.
#
# Comments and string literals are blanked first, so prose such as "a group
# of 32 lanes" is not flagged; nor are group widths enumerated as numbers
# (with_group_shape's IntConst<32>, tuning's "c.group > 32"), a vector of
# 16 bytes, or other 32s that are not warp widths (norm_backward_finalize's
# 32 columns per block, ceil_div(cols, 32)).
#
# --self-test plants one violation of each rule (and a few legitimate 32s)
# in a temporary directory and checks that exactly the violations are flagged.
set -eu

scan() {
  dir=$1
  exempt=$2
  find "$dir" -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) |
    LC_ALL=C sort | while read -r f; do
      [ "$f" -ef "$exempt" ] && continue
      awk -v file="$f" '
        # Blank comments and string/char literals, keeping columns and lines.
        function strip(line,    out, i, c, n) {
          out = ""; n = length(line); i = 1
          while (i <= n) {
            c = substr(line, i, 1)
            if (in_block) {
              if (substr(line, i, 2) == "*/") { in_block = 0; out = out "  "; i += 2 } else { out = out " "; i++ }
            } else if (substr(line, i, 2) == "/*") { in_block = 1; out = out "  "; i += 2
            } else if (substr(line, i, 2) == "//") { break
            } else if (c == "\"" || c == "\047") {
              q = c; out = out c; i++
              while (i <= n && substr(line, i, 1) != q) {
                if (substr(line, i, 1) == "\\") { out = out " "; i++ }
                out = out " "; i++
              }
              out = out q; i++
            } else { out = out c; i++ }
          }
          return out
        }
        function flag(rule, why) { printf "%s:%d: [%s] %s\n    %s\n", file, NR, rule, why, raw; bad = 1 }
        BEGIN { in_block = 0; bad = 0
          B = "(^|[^A-Za-z0-9_])"; E = "([^A-Za-z0-9_.]|$)"; W = "[ \t]*" }
        {
          raw = $0
          s = strip($0)
          l = tolower(s)
          if (l ~ ("0x" "ffffffff" "[ul]*" E) || l ~ ("~" W "0[ul]+" E) || l ~ ("~" W "\\(?" W "(uint32_t|unsigned( int)?)" W "\\)?" W "\\(?" W "0" W "\\)?") ||
              s ~ (B "(UINT32_MAX|UINT_MAX)" E) || s ~ ("\\(" W "unsigned" W "\\)" W "-" W "1" E))
            flag("mask", "32-bit full lane mask; use kAllLanes (lane_mask_t is 64 bits on AMD)")
          if (s ~ ("(^|[^A-Za-z0-9_.>])(__shfl[A-Za-z0-9_]*|__ballot[A-Za-z0-9_]*|__activemask|__syncwarp|__any(_sync)?|__all(_sync)?|__match_[A-Za-z0-9_]*|__reduce_[A-Za-z0-9_]*_sync|__lane_id|warpSize|__AMDGCN_WAVEFRONT_SIZE|__builtin_amdgcn_[A-Za-z0-9_]*)" E))
            flag("intrinsic", "vendor warp intrinsic or width; use the portability.cuh wrappers")
          if (s ~ (B "(shfl_[A-Za-z0-9_]*|ballot)" W "\\([^;]*" B "(32|64)" E) || s ~ ("group_all_reduce" W "<" W "(32|64)" W ">"))
            flag("width", "literal warp width as a shuffle or reduction width; use G or kWarpSize")
          if (l ~ "(threadidx|blockdim|lane|warp|thread)" &&
              (s ~ ("[%/]" W "(32|64)" E) || s ~ ("&" W "(31|63)" E) || s ~ (">>" W "[56]" E)))
            flag("lanemath", "lane or warp index math with a literal width; use lane_id(), warp_id(), kWarpSize")
          if (s ~ ("__shared__[^;]*\\[" W "(32|64)" W "\\]"))
            flag("shared", "per-warp shared array sized by a literal; use kMaxWarpsPerBlock")
          if (s ~ (B "(uint32_t|unsigned|int|unsigned int|unsigned)" W "[A-Za-z_][A-Za-z0-9_]*" W "=" W "ballot" W "\\("))
            flag("masktype", "ballot result in a 32-bit variable; use lane_mask_t")
          if (s ~ (B "(kWarpSize|warp_size|warpSize)" W "[!=<>]=?" W "(32|64)" E) ||
              s ~ (B "(32|64)" W "[!=<>]=?" W "(kWarpSize|warp_size|warpSize)" E) ||
              l ~ ("warp[a-z0-9_]*" W "(=|\\{)" W "(32|64)" E))
            flag("warpsize", "literal warp width; use kWarpSize (device) or DeviceInfo::warp_size (host)")
        }
        END { exit bad }
      ' "$f" || echo "FAILED" 
    done
}

run() {
  out=$(scan "$1" "$2")
  if printf '%s\n' "$out" | grep -q '^FAILED$'; then
    printf '%s\n' "$out" | grep -v '^FAILED$' >&2
    echo "check_warp_literals: warp-width literals outside $2 (rules: head of $0)" >&2
    return 1
  fi
  echo "check_warp_literals: no warp-width literals in $1 outside $(basename "$2")"
}

self_test() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  touch "$tmp/portability.cuh"
  # One file per planted violation: each must be flagged, with its rule.
  n=0
  while IFS='|' read -r rule code; do
    n=$((n + 1))
    printf '%s\n' "$code" > "$tmp/bad$n.cu"
    out=$(scan "$tmp" "$tmp/portability.cuh" 2>&1)
    if ! printf '%s\n' "$out" | grep -q "bad$n.cu:1: \[$rule\]"; then
      echo "self-test: not flagged as [$rule]: $code" >&2
      printf '%s\n' "$out" >&2
      return 1
    fi
    rm "$tmp/bad$n.cu"
  done <<'EOF'
mask|  v = __shfl_xor_sync(0xffffffff, v, 1);
mask|  const unsigned m = 0xFFFFFFFFu;
mask|  lane_mask_t all = ~0u;
mask|  uint32_t all = ~uint32_t(0);
intrinsic|  v += __shfl_down_sync(kAllLanes, v, offset);
intrinsic|  const int w = warpSize;
intrinsic|  v = __shfl_xor(v, 1, 64);
width|  v = shfl_xor(v, offset, 32);
width|  v = group_all_reduce<64>(v, op);
lanemath|  const int lane = threadIdx.x % 32;
lanemath|  const int warp = int(threadIdx.x) / 64;
lanemath|  const int lane = threadIdx.x & 31;
lanemath|  const int warps = blockDim.x >> 5;
shared|  __shared__ float partials[32];
masktype|  const uint32_t votes = ballot(x > 0.0f);
warpsize|  if (kWarpSize == 32) return;
warpsize|  constexpr int kWarp = 64;
EOF
  # Legitimate 32s (and a commented-out violation) must pass.
  cat > "$tmp/good.cu" <<'EOF'
// a group of 32 lanes; threadIdx.x % 32 in a comment is fine
/* 0xffffffff in a block comment
   and threadIdx.x & 31 on its next line */
case 32 * 4 + 1: f(IntConst<32>{}, IntConst<1>{}, IntConst<1>{}); return true;
if (c.group < 1 || c.group > 32 || c.group > warp_size) return false;
inline constexpr int kVectorBytes = 16;
const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
const int blocks = int(ceil_div(a.cols, 32));
report("lane % 32 in a string");
for (int offset = G; offset < kWarpSize; offset *= 2) v += shfl_xor(v, offset, kWarpSize);
const int warps = int(blockDim.x) / kWarpSize;
info.warp_size = prop.warpSize;
EOF
  out=$(scan "$tmp" "$tmp/portability.cuh" 2>&1)
  if [ -n "$out" ]; then
    echo "self-test: legitimate code was flagged:" >&2
    printf '%s\n' "$out" >&2
    return 1
  fi
  echo "check_warp_literals self-test: $n planted violations flagged, legitimate code passed"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
else
  [ $# -ge 1 ] || { echo "usage: $0 DIR [EXEMPT_FILE] | --self-test" >&2; exit 2; }
  run "$1" "${2:-$1/portability.cuh}"
fi
