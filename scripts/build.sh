#!/usr/bin/env bash
# Configures and builds Titan in build/ (ninja + ccache + precompiled LibTorch header).
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]; TITAN_BUILD_TARGETS
# (space-separated) builds only those targets, e.g. "titan titan_all_plugins".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}; shift || true
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/titan-ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
if [ ! -f "$build/build.ninja" ]; then
  # LibTorch: the torch wheel scripts/setup.sh put in .venv/ (TITAN_PYTHON: another one).
  python=${TITAN_PYTHON:-$root/.venv/bin/python}
  torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') ||
    { echo "titan build: no torch in $python; run scripts/setup.sh first" >&2; exit 1; }
  # clang 19 where scripts/setup.sh installed it: it builds Titan in about
  # 70% of GCC's compiler time (docs/testing.md, "The compiler"); CXX=g++
  # (or any CXX) chooses another.
  compiler=()
  if [ -z "${CXX:-}" ] && command -v clang++-19 >/dev/null; then compiler=(-DCMAKE_CXX_COMPILER=clang++-19); fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Quick} \
    -DCMAKE_PREFIX_PATH="$torch_prefix" "${compiler[@]}" "$@"
fi
targets=()
for target in ${TITAN_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j "${TITAN_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
