#!/bin/sh
# Usage: check_kernel_waits.sh DIR
#        check_kernel_waits.sh --self-test
#
# The GPU backend launches its kernels so that each may overlap the stream's
# previous kernel (launch_kernel in src/cuda/launch.cuh: programmatic
# dependent launch on NVIDIA sm_90), which is only correct if the kernel
# calls wait_for_prior_kernel() before it touches memory that kernel may
# read or write. This check fails, naming file and line, on any __global__
# function in a .cu or .cuh file under DIR whose body never calls it. (Where
# in the body is the author's part: before the first access of memory
# another kernel may use.) Comments are ignored.
#
# --self-test plants a kernel without the call beside two with it and checks
# that exactly the first is flagged.
set -eu

scan() {
  find "$1" -type f \( -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort | while read -r f; do
    awk -v file="$f" '
      # The file as one string with comments blanked (newlines kept, for line numbers).
      {
        line = $0; out = ""
        while (length(line) > 0) {
          if (in_block) {
            e = index(line, "*/")
            if (e == 0) { line = "" } else { line = substr(line, e + 2); in_block = 0 }
          } else {
            b = index(line, "/*"); c = index(line, "//")
            if (c > 0 && (b == 0 || c < b)) { out = out substr(line, 1, c - 1); line = "" }
            else if (b > 0) { out = out substr(line, 1, b - 1); line = substr(line, b + 2); in_block = 1 }
            else { out = out line; line = "" }
          }
        }
        text = text out "\n"
      }
      END {
        bad = 0; pos = 1; n = length(text)
        while ((g = index(substr(text, pos), "__global__")) > 0) {
          start = pos + g - 1
          # The body: from the first "{" after the declaration to its match.
          i = start; while (i <= n && substr(text, i, 1) != "{") i++
          depth = 0; j = i
          for (; j <= n; j++) {
            ch = substr(text, j, 1)
            if (ch == "{") depth++
            else if (ch == "}" && --depth == 0) break
          }
          body = substr(text, i, j - i + 1)
          if (index(body, "wait_for_prior_kernel()") == 0) {
            before = substr(text, 1, start - 1)
            lineno = 1 + gsub(/\n/, "\n", before)
            head = substr(text, start, i - start); gsub(/[ \t\n]+/, " ", head)
            printf "%s:%d: kernel without wait_for_prior_kernel(): %s\n", file, lineno, substr(head, 1, 160)
            bad = 1
          }
          pos = j + 1
        }
        exit bad
      }' "$f" || echo "FAILED"
  done
}

run() {
  out=$(scan "$1")
  if printf '%s\n' "$out" | grep -q '^FAILED$'; then
    printf '%s\n' "$out" | grep -v '^FAILED$' >&2
    echo "check_kernel_waits: kernels in $1 that never wait for the previous kernel (see the head of $0)" >&2
    return 1
  fi
  echo "check_kernel_waits: every kernel in $1 calls wait_for_prior_kernel()"
}

self_test() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cat > "$tmp/k.cu" <<'EOF'
template <class T>
__global__ void __launch_bounds__(256) waits(const T *x, T *y) {
  __shared__ float s[4];
  wait_for_prior_kernel();
  if (x) { y[0] = x[0]; }
}
// __global__ void in_a_comment() {}
/* __global__ void in_a_block_comment() { } */
__global__ void forgets(const float *x, float *y) {
  if (x) { y[0] = x[0]; }  // wait_for_prior_kernel() only in a comment
}
__global__ void probe() { wait_for_prior_kernel(); }
EOF
  out=$(scan "$tmp" 2>&1)
  if [ "$(printf '%s\n' "$out" | grep -c 'kernel without')" != 1 ] || ! printf '%s\n' "$out" | grep -q 'k.cu:9: .*forgets'; then
    echo "self-test: expected exactly k.cu:9 (forgets) flagged, got:" >&2
    printf '%s\n' "$out" >&2
    return 1
  fi
  echo "check_kernel_waits self-test: the kernel without the call flagged, the others passed"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
else
  [ $# -eq 1 ] || { echo "usage: $0 DIR | --self-test" >&2; exit 2; }
  run "$1"
fi
