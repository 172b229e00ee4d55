#!/bin/sh
# Packaging checks run by CTest (label packaging); see packaging/CMakeLists.txt.
#   check.sh STEP SOURCE_DIR BUILD_DIR WORK_DIR
# Steps:
#   install        cmake --install BUILD_DIR into WORK_DIR/prefix and check the layout
#   find-package   build consumer/ against WORK_DIR/prefix with find_package(xvk), run it
#   pkg-config     build consumer/consumer.c with `pkg-config --cflags --libs xvk`, run it
#   deb-build      configure a /usr-prefixed build of SOURCE_DIR, cpack -G DEB, check contents
#   deb-install    dpkg -i libxvk0 and libxvk-dev, build the consumer against /usr both ways,
#                  run it, then purge the packages again (root only)
#   conda          run recipe/build.sh with temporary SRC_DIR and PREFIX, once per output
# Exit status 77 means skipped (CTest SKIP_RETURN_CODE); the reason is printed first.
# Environment: CC (the C compiler), CMAKE_GENERATOR, CMAKE_MAKE_PROGRAM (forwarded to nested builds).
set -eu
step=$1 src=$2 build=$3 work=$4
consumer=$src/packaging/consumer
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
# cmake_configure SRC BIN ARGS...: configure with the same generator and C compiler as the outer build.
cmake_configure() {
  s=$1 b=$2; shift 2
  if [ -n "${CMAKE_GENERATOR:-}" ]; then
    cmake -S "$s" -B "$b" -G "$CMAKE_GENERATOR" ${CMAKE_MAKE_PROGRAM:+"-DCMAKE_MAKE_PROGRAM=$CMAKE_MAKE_PROGRAM"} \
      ${CC:+"-DCMAKE_C_COMPILER=$CC"} "$@"
  else
    cmake -S "$s" -B "$b" ${CC:+"-DCMAKE_C_COMPILER=$CC"} "$@"
  fi
}
# expect_files DIR PATTERN...: each shell pattern (relative to DIR) matches at least one file.
expect_files() {
  d=$1; shift
  for p in "$@"; do
    # shellcheck disable=SC2086
    set -- $d/$p
    [ -e "$1" ] || fail "$d: nothing matches $p"
    echo "  ok: $p"
  done
}
# build_with_pkg_config OUT [PKG_CONFIG_PATH]: compile the consumer with pkg-config's flags.
build_with_pkg_config() {
  out=$1
  have pkg-config || skip "pkg-config is not installed"
  echo "pkg-config --cflags --libs xvk: $(pkg-config --cflags --libs xvk)"
  # shellcheck disable=SC2046
  ${CC:-cc} -std=c99 -Wall -Werror "$consumer/consumer.c" -o "$out" $(pkg-config --cflags --libs xvk) -lm
}

case $step in
install)
  rm -rf "$work/prefix"
  cmake --install "$build" --prefix "$work/prefix"
  libdir=$(ls -d "$work"/prefix/lib*/ | head -n 1)
  [ -e "$libdir/pkgconfig/xvk.pc" ] || fail "no pkgconfig/xvk.pc under $libdir"
  expect_files "$work/prefix" "lib*/libxvk.so" "lib*/libxvk.so.0" "lib*/libxvk.so.0.*" "include/xvk/xvk.h" \
    "lib*/cmake/xvk/xvk-config.cmake" "lib*/cmake/xvk/xvk-config-version.cmake" \
    "lib*/cmake/xvk/xvk-targets.cmake" "lib*/pkgconfig/xvk.pc"
  for module in cuda hip; do
    if [ -e "$build/lib/libxvk_$module.so" ]; then
      expect_files "$work/prefix" "lib*/libxvk_$module.so"
    fi
  done
  echo "installed files:"; (cd "$work/prefix" && find . -type f -o -type l | sort)
  ;;
find-package)
  [ -d "$work/prefix" ] || fail "run the install step first"
  rm -rf "$work/consumer-find-package"
  cmake_configure "$consumer" "$work/consumer-find-package" "-DCMAKE_PREFIX_PATH=$work/prefix"
  grep '^xvk_DIR' "$work/consumer-find-package/CMakeCache.txt"
  cmake --build "$work/consumer-find-package"
  "$work/consumer-find-package/consumer"
  ;;
pkg-config)
  [ -d "$work/prefix" ] || fail "run the install step first"
  PKG_CONFIG_PATH=$(ls -d "$work"/prefix/lib*/pkgconfig | head -n 1)
  export PKG_CONFIG_PATH
  build_with_pkg_config "$work/consumer-pkg-config"
  LD_LIBRARY_PATH=$(pkg-config --variable=libdir xvk) "$work/consumer-pkg-config"
  ;;
deb-build)
  have dpkg-deb || skip "dpkg-deb is not installed (apt-get install dpkg)"
  have cpack || fail "cpack is not on PATH"
  rm -rf "$work/deb"
  (
    # Debian's compiler and linker flags (hardening included), as a Debian build would use.
    if have dpkg-buildflags; then
      eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
      CFLAGS="$CFLAGS $CPPFLAGS" CXXFLAGS="$CXXFLAGS $CPPFLAGS"
      export CFLAGS CXXFLAGS LDFLAGS
      echo "dpkg-buildflags: CXXFLAGS=$CXXFLAGS LDFLAGS=$LDFLAGS"
    fi
    cmake_configure "$src" "$work/deb/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
      -DXVK_BUILD_TESTS=OFF -DXVK_BUILD_BENCH=OFF >/dev/null
  )
  cmake --build "$work/deb/build"
  (cd "$work/deb/build" && cpack -G DEB -B "$work/deb/out")
  for deb in "$work"/deb/out/*.deb; do
    echo "== $(basename "$deb")"
    dpkg-deb --field "$deb" Package Version Section Depends
    dpkg-deb --contents "$deb"
  done
  contents() { dpkg-deb --contents "$work"/deb/out/"$1"_*.deb | awk '{print $6}'; }
  contents libxvk0 | grep -q '/usr/lib/.*/libxvk\.so\.0$' || fail "libxvk0 lacks libxvk.so.0"
  contents libxvk0 | grep -q 'include/' && fail "libxvk0 holds headers"
  contents libxvk-dev | grep -q '/usr/include/xvk/xvk\.h$' || fail "libxvk-dev lacks xvk.h"
  contents libxvk-dev | grep -q '/cmake/xvk/xvk-config\.cmake$' || fail "libxvk-dev lacks xvk-config.cmake"
  contents libxvk-dev | grep -q '/pkgconfig/xvk\.pc$' || fail "libxvk-dev lacks xvk.pc"
  contents libxvk-dev | grep -q 'libxvk\.so\.0' && fail "libxvk-dev holds the runtime library"
  dpkg-deb --field "$work"/deb/out/libxvk-dev_*.deb Depends | grep -q libdlpack-dev ||
    fail "libxvk-dev does not depend on libdlpack-dev"
  echo "Debian packages in $work/deb/out"
  ;;
deb-install)
  have dpkg || skip "dpkg is not installed"
  [ "$(id -u)" = 0 ] || skip "installing the .deb files needs root (CI runs as root)"
  ls "$work"/deb/out/libxvk0_*.deb >/dev/null 2>&1 || fail "run the deb-build step first"
  if dpkg-query -W -f '${Status}' libxvk0 2>/dev/null | grep -q 'ok installed'; then
    skip "libxvk0 is already installed on this machine; not replacing it"
  fi
  cleanup() { dpkg --purge libxvk-dev libxvk0 >/dev/null || echo "warning: could not purge libxvk-dev libxvk0"; }
  trap cleanup EXIT
  dpkg -i "$work"/deb/out/libxvk0_*.deb "$work"/deb/out/libxvk-dev_*.deb
  rm -rf "$work/deb-consumer-find-package"
  cmake_configure "$consumer" "$work/deb-consumer-find-package"
  grep '^xvk_DIR' "$work/deb-consumer-find-package/CMakeCache.txt" | grep -q '^xvk_DIR:PATH=/usr/' ||
    fail "find_package did not find the installed package under /usr"
  grep '^xvk_DIR' "$work/deb-consumer-find-package/CMakeCache.txt"
  cmake --build "$work/deb-consumer-find-package"
  env -u LD_LIBRARY_PATH "$work/deb-consumer-find-package/consumer"
  unset PKG_CONFIG_PATH
  build_with_pkg_config "$work/deb-consumer-pkg-config"
  ldd "$work/deb-consumer-pkg-config" | grep libxvk
  env -u LD_LIBRARY_PATH "$work/deb-consumer-pkg-config"
  ;;
conda)
  # conda-build is not installable here: run recipe/build.sh as conda-build would, with fresh
  # SRC_DIR (a copy of the source) and PREFIX folders, once for the top-level build and once
  # per output with PKG_NAME set, and check which files each output adds to PREFIX.
  rm -rf "$work/conda"
  mkdir -p "$work/conda/src" "$work/conda/prefix"
  (cd "$src" && tar --exclude=./build --exclude=./.git --exclude=./out -cf - .) | tar -C "$work/conda/src" -xf -
  SRC_DIR=$work/conda/src PREFIX=$work/conda/prefix RECIPE_DIR=$work/conda/src/recipe CPU_COUNT=${CPU_COUNT:-2}
  export SRC_DIR PREFIX RECIPE_DIR CPU_COUNT
  listing() { (cd "$PREFIX" && find . ! -type d | sort); }
  (cd "$SRC_DIR" && PKG_NAME=xvk-split bash "$RECIPE_DIR/build.sh")
  [ -z "$(listing)" ] || fail "the top-level build installed files into PREFIX"
  for output in libxvk libxvk-dev; do
    listing > "$work/conda/before"
    (cd "$SRC_DIR" && PKG_NAME=$output bash "$RECIPE_DIR/build.sh")
    listing > "$work/conda/after"
    comm -13 "$work/conda/before" "$work/conda/after" > "$work/conda/$output.files"
    echo "== output $output adds:"; cat "$work/conda/$output.files"
  done
  grep -qx './lib/libxvk.so.0' "$work/conda/libxvk.files" || fail "libxvk lacks lib/libxvk.so.0"
  grep -q 'include/' "$work/conda/libxvk.files" && fail "libxvk holds headers"
  for f in ./lib/libxvk.so ./include/xvk/xvk.h ./lib/cmake/xvk/xvk-config.cmake ./lib/pkgconfig/xvk.pc; do
    grep -qx "$f" "$work/conda/libxvk-dev.files" || fail "libxvk-dev lacks $f"
  done
  grep -q 'libxvk\.so\.0' "$work/conda/libxvk-dev.files" && fail "libxvk-dev holds the runtime library"
  rm -rf "$work/conda/consumer"
  cmake_configure "$consumer" "$work/conda/consumer" "-DCMAKE_PREFIX_PATH=$PREFIX" >/dev/null
  cmake --build "$work/conda/consumer"
  "$work/conda/consumer/consumer"
  ;;
*)
  fail "unknown step $step"
  ;;
esac
