#!/usr/bin/env bash
# One fuzz target's short run in the test suite: the whole corpus (seeds and
# regression inputs), then RUNS mutated inputs from a fixed seed, at most
# SECONDS. New inputs go to a scratch folder, never into the repo's corpus;
# a crashing input is saved under BUILD/crashes/ and fails the test.
# Usage: short_run.sh FUZZER CORPUS_DIR BUILD_DIR RUNS SECONDS
set -euo pipefail
fuzzer=$1 corpus=$2 build=$3 runs=$4 seconds=$5
name=$(basename "$fuzzer")
dict=$(dirname "$corpus")/../dict/$(basename "$corpus").dict
scratch=$build/short_run/$name
rm -rf "$scratch"
mkdir -p "$scratch" "$build/crashes"
status=0
"$fuzzer" -seed=1 -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -dict="$dict" -print_final_stats=1 -artifact_prefix="$build/crashes/$name-" "$scratch" "$corpus" 2>"$scratch.log" || status=$?
tail -n 25 "$scratch.log"
if [ "$status" -ne 0 ]; then
  echo "$name: FAILED (exit $status); the input is in $build/crashes/, the log in $scratch.log" >&2
  echo "reproduce: $fuzzer $build/crashes/$name-<crash file>" >&2
fi
exit "$status"
