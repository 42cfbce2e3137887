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
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Quick} "$@"
fi
targets=()
for target in ${TITAN_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j "${TITAN_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
