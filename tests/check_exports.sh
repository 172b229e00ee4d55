#!/bin/sh
# Usage: check_exports.sh LIBRARY EXPECTED_LIST
# Fails, printing a diff, when the symbols LIBRARY exports (nm -D
# --defined-only, types T D B R W, version suffix stripped) differ from the
# committed list EXPECTED_LIST (one name per line, sorted).
set -eu
lib=$1
expected=$2
[ -f "$lib" ] || { echo "no such library: $lib" >&2; exit 1; }
[ -f "$expected" ] || { echo "no such list: $expected" >&2; exit 1; }
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
nm -D --defined-only "$lib" |
  awk 'NF >= 3 && $2 ~ /^[TDBRW]$/ { name = $3; sub(/@.*/, "", name); print name }' |
  LC_ALL=C sort -u > "$actual"
if [ ! -s "$actual" ]; then
  echo "nm found no exported symbols in $lib" >&2
  exit 1
fi
if ! diff -u "$expected" "$actual"; then
  echo "The exported symbols of $lib differ from $expected (- committed, + built)." >&2
  echo "If the change is intended, update $expected in the same commit." >&2
  exit 1
fi
echo "$(wc -l < "$actual") exported symbols match $expected"
