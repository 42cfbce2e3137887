#!/usr/bin/env bash
# Installs what Titan needs, builds it, and runs the whole test suite; ends
# with what each phase and each test label took (the budget is in
# docs/testing.md). Extra arguments go to ctest, e.g. `-L unit` or `-R fsdp`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build

start=$SECONDS
bash "$root/scripts/setup.sh"
setup_s=$((SECONDS - start))

start=$SECONDS
bash "$root/scripts/build.sh" "$build"
# The parsers' fuzz targets: a small clang project of its own (build/fuzz);
# their short runs are ctest tests labelled `fuzz`.
bash "$root/scripts/fuzz.sh" build
build_s=$((SECONDS - start))

start=$SECONDS
status=0
(cd "$build" && ctest --output-on-failure -j "${TITAN_TEST_JOBS:-2}" --timeout 900 \
  --output-junit "$build/ctest-junit.xml" "$@") || status=$?
tests_s=$((SECONDS - start))

printf 'setup %s\nbuild %s\ntests %s\n' "$setup_s" "$build_s" "$tests_s" >"$build/ci_phases.txt"
bash "$root/scripts/ci_times.sh" "$build" --top 10 || true
exit "$status"
