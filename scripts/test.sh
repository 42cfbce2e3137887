#!/usr/bin/env bash
# Installs what Titan needs, builds it, and runs the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$root/build"
cd "$root/build"
ctest --output-on-failure -j "${TITAN_TEST_JOBS:-2}" --timeout 900
