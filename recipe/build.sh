#!/usr/bin/env bash
# conda-build script for xvk (see meta.yaml). conda-build runs it once for the top-level package,
# which configures and builds into $SRC_DIR/build-conda, and once per output with PKG_NAME set to
# the output's name, which installs that output's CMake install component into $PREFIX:
#   libxvk        runtime      lib/libxvk.so.0*
#   libxvk-dev    development  include/xvk/, lib/libxvk.so, lib/cmake/xvk/, lib/pkgconfig/xvk.pc
#   libxvk-cuda   cuda         lib/libxvk_cuda.so   (when built with a CUDA compiler)
#   libxvk-hip    hip          lib/libxvk_hip.so    (when XVK_CONDA_HIP=1)
set -euxo pipefail

build_dir="$SRC_DIR/build-conda"
cuda=OFF
if [[ -n "${cuda_compiler_version:-}" && "${cuda_compiler_version}" != "None" ]]; then cuda=ON; fi
hip=OFF
if [[ "${XVK_CONDA_HIP:-0}" == 1 ]]; then hip=ON; fi

if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # CMAKE_ARGS carries conda's toolchain settings when its compilers are active.
  # shellcheck disable=SC2086
  cmake -S "$SRC_DIR" -B "$build_dir" -G Ninja ${CMAKE_ARGS:-} \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" \
    -DCMAKE_INSTALL_LIBDIR=lib \
    -DCMAKE_PREFIX_PATH="$PREFIX" \
    -DXVK_ENABLE_CUDA="$cuda" \
    -DXVK_ENABLE_HIP="$hip" \
    -DXVK_BUILD_TESTS=OFF \
    -DXVK_BUILD_BENCH=OFF
fi
cmake --build "$build_dir" --parallel "${CPU_COUNT:-1}"

case "${PKG_NAME:-}" in
  libxvk) component=runtime ;;
  libxvk-dev) component=development ;;
  libxvk-cuda) component=cuda ;;
  libxvk-hip) component=hip ;;
  *) exit 0 ;;  # the top-level build: nothing to install
esac
cmake --install "$build_dir" --component "$component" --strip
