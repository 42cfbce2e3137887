#!/usr/bin/env bash
# The fuzz targets of every parser of outside input (tests/fuzz, libFuzzer
# under AddressSanitizer + UBSan, clang). See docs/reliability.md#fuzzing.
#   scripts/fuzz.sh [SECONDS] [TARGET...]  fuzz each target (default: all) for SECONDS (default 60)
#   scripts/fuzz.sh build                  configure and build the targets only (scripts/test.sh does this)
#   scripts/fuzz.sh seeds                  rewrite the seed corpora with the project's own writers
#   scripts/fuzz.sh list                   the target names
# Long runs keep what they find in build/fuzz/found/<target> (reused by the
# next run; the repo's corpus stays small) and write crashing inputs to
# build/fuzz/crashes/ (TITAN_FUZZ_CRASHES to change). TITAN_FUZZ_JOBS=2 runs
# two processes per target. Each run appends "target runs seconds status"
# to build/fuzz/fuzz_runs.tsv, so the inputs run so far can be added up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TITAN_FUZZ_BUILD:-$root/build/fuzz}
corpus=$root/tests/fuzz/corpus
targets_all=(config dcp_checkpoint safetensors safetensors_index hf_tokenizer tiktoken token_data fr_dumps)

configure_and_build() {
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/titan-ccache}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  if [ ! -f "$build/build.ninja" ]; then
    torch_prefix=$("${TITAN_PYTHON:-$root/.venv/bin/python}" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
    # The clang that builds Titan (scripts/build.sh), with its libFuzzer.
    clang=clang++; command -v clang++-19 >/dev/null && clang=clang++-19
    cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${TITAN_FUZZ_CXX:-$clang}" \
      -DCMAKE_PREFIX_PATH="$torch_prefix" "$@" >/dev/null
  elif (($#)); then
    cmake "$build" "$@" >/dev/null
  fi
  cmake --build "$build" -j "${TITAN_BUILD_JOBS:-$(nproc)}"
}

case "${1:-}" in
  build)
    shift
    configure_and_build "$@"
    exit 0
    ;;
  seeds)
    configure_and_build -DTITAN_FUZZ_SEEDS=ON
    work=$(mktemp -d)
    ASAN_OPTIONS=detect_leaks=0 "$build/make_seeds" "$corpus" "$work"
    rm -rf "$work"
    # The config seeds are the project's own configs, one with --set values.
    mkdir -p "$corpus/config"
    for name in llama3_debugmodel llama3_debugmodel_fsdp_tp llama3_debugmodel_float8 llama3_8b; do
      cp "$root/configs/$name.yaml" "$corpus/config/$name.yaml"
    done
    printf '%s\0training.steps=20\0plugins.fsdp.reshard_after_forward=always\0comm.verify_collectives=true' \
      "$(cat "$root/configs/llama3_debugmodel_fsdp.yaml")" >"$corpus/config/fsdp_with_overrides"
    exit 0
    ;;
  list)
    printf '%s\n' "${targets_all[@]}"
    exit 0
    ;;
esac

seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=("${targets_all[@]}")
configure_and_build
crashes=${TITAN_FUZZ_CRASHES:-$build/crashes}
mkdir -p "$crashes"
status=0
for target in "${targets[@]}"; do
  found=$build/found/$target
  mkdir -p "$found"
  log=$build/found/$target.log
  jobs=${TITAN_FUZZ_JOBS:-1}
  echo "fuzz $target: ${seconds}s, $jobs process(es), corpus $corpus/$target"
  # With several jobs each worker logs to fuzz-<n>.log in the current
  # folder, and libFuzzer copies each worker's log to its own output.
  workdir=$build/found/$target.jobs
  rm -rf "$workdir" && mkdir -p "$workdir"
  parallel=()
  ((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
  rc=0
  (cd "$workdir" && "$build/fuzz_$target" "${parallel[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -dict="$root/tests/fuzz/dict/$target.dict" -print_final_stats=1 \
    -artifact_prefix="$crashes/$target-" "$found" "$corpus/$target") >"$log" 2>&1 || rc=$?
  # Units executed, summed over the workers (the exit code of a job run
  # does not carry a worker's crash; its log does).
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | awk '{s += $2} END {print s + 0}')
  if grep -qE 'ERROR: (libFuzzer|[A-Za-z]+Sanitizer)|Test unit written' "$log"; then ((rc)) || rc=1; fi
  printf '%s\t%s\t%s\t%s\n' "$target" "${execs:-0}" "$seconds" "$rc" >>"$build/fuzz_runs.tsv"
  echo "  $execs inputs, exit $rc; log $log"
  if ((rc != 0)); then
    status=1
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5 || true
  fi
done
exit "$status"
