#!/bin/sh
# Usage: check_elf.sh LIBRARY EXPECTED_SONAME
# libxvk must not link a GPU runtime (the CUDA/HIP backends are modules
# loaded at run time), and its SONAME must carry the ABI's major version.
set -eu
lib=$1
soname=$2
dyn=$(readelf -d "$lib")
status=0
if printf '%s\n' "$dyn" | grep NEEDED | grep -E 'libcudart|libamdhip64|libcuda[.]'; then
  echo "FAIL: $lib links a GPU runtime (the NEEDED entries above)" >&2
  status=1
fi
if ! printf '%s\n' "$dyn" | grep -q "(SONAME).*\[$soname\]"; then
  echo "FAIL: SONAME of $lib is not $soname:" >&2
  printf '%s\n' "$dyn" | grep SONAME >&2 || echo "(no SONAME)" >&2
  status=1
fi
printf '%s\n' "$dyn" | grep -E 'NEEDED|SONAME'
exit $status
