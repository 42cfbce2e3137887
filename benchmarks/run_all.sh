#!/usr/bin/env bash
# Every benchmark at a CI-sized shape, one after the other, then one table:
# each headline number of ours beside its reference, both measured in this
# run, and their ratio. Each benchmark's whole output stays in the output
# folder (its own tables, docs/benchmarks.md explains them).
#
# Usage: benchmarks/run_all.sh [BUILD_DIR]   (default build; build-release
#        for numbers of record). Run it on an otherwise idle machine.
# Env:   TITAN_BENCH_OUT    folder for the outputs (default: a new temp folder)
#        TITAN_BENCH_SKIP   space-separated names to leave out (see `benches` below)
#        TITAN_BENCH_SLOW_LINK=1  also run titan_bench_slow_link (root, network
#                                 namespaces; a few minutes)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${TITAN_BENCH_OUT:-$(mktemp -d -t titan-bench-XXXXXX)}
mkdir -p "$out"
cd "$root"  # the benchmarks read assets/ and configs/ from here
bin=$build/bin
for tool in titan titan_bench_overhead titan_bench_pipeline titan_bench_moe titan_bench_host_step; do
  [[ -x $bin/$tool ]] || { echo "run_all: $bin/$tool not found; build first (scripts/build.sh)" >&2; exit 2; }
done

declare -A seconds
rows=()
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

skipped() { [[ " ${TITAN_BENCH_SKIP:-} " == *" $1 "* ]]; }

# run NAME COMMAND...: its output into $out/NAME.txt; a failure stops everything.
run() {
  local name=$1
  shift
  local start=$SECONDS
  echo "run_all: $name ..." >&2
  if ! "$@" >"$out/$name.txt" 2>&1; then
    echo "run_all: $name failed; its output ends:" >&2
    tail -n 30 "$out/$name.txt" >&2
    exit 1
  fi
  seconds[$name]=$((SECONDS - start))
}

# cell NAME LABEL COLUMN: the COLUMN-th cell (1 = the label's) of the first
# markdown row of NAME's output whose first cell is LABEL.
cell() {
  local value
  value=$(awk -F'|' -v label="$2" -v column="$3" '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^\|/ && trim($2) == label { print trim($(column + 1)); exit }' "$out/$1.txt")
  if [[ -z $value ]]; then
    echo "run_all: $1's output has no row '$2' (column $3): its format changed; see $out/$1.txt" >&2
    exit 1
  fi
  echo "$value"
}

ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.3f}' if b else 'n/a')" "$1" "$2"; }

# row BENCHMARK WHAT OURS REFERENCE [RATIO]: one line of the summary.
row() {
  local measured=${5:-$(ratio "$3" "$4")}
  rows+=("| $1 | $2 | $3 | $4 | $measured | ${seconds[$1]} |")
}

if ! skipped overhead; then
  run overhead "$bin/titan_bench_overhead" 8 2
  row overhead "s/step: \`titan train\` vs a hand-written LibTorch loop (debug model, 2 threads)" \
    "$(cell overhead "titan train" 2)" "$(cell overhead "hand-written LibTorch" 2)"
fi
if ! skipped flight_recorder; then
  run flight_recorder "$bin/titan_bench_flight_recorder" 8 1 2
  row flight_recorder "s/step: FSDP 2 ranks with the flight recorder vs without" \
    "$(cell flight_recorder "fsdp + flight_recorder" 2)" "$(cell flight_recorder "fsdp, no recorder" 2)"
fi
if ! skipped checkpoint; then
  run checkpoint "$bin/titan_bench_checkpoint" 64 2
  row checkpoint "s the training thread waits for a 64 MiB save: async vs sync" \
    "$(cell checkpoint async 2)" "$(cell checkpoint disabled 2)"
fi
if ! skipped profiler; then
  run profiler "$bin/titan_bench_profiler" 8 1 2
  row profiler "s/step: profiler on, outside its window vs off" \
    "$(cell profiler "on, outside its window" 2)" "$(cell profiler "profiling off" 2)"
fi
if ! skipped activation_checkpoint; then
  run activation_checkpoint "$bin/titan_bench_activation_checkpoint" 1 2
  row activation_checkpoint "activation MiB: full AC vs none (debug model)" \
    "$(cell activation_checkpoint full 2)" "$(cell activation_checkpoint none 2)"
  row activation_checkpoint "s/step: full AC vs none" \
    "$(cell activation_checkpoint full 6)" "$(cell activation_checkpoint none 6)"
fi
if ! skipped context_parallel; then
  run context_parallel "$bin/titan_bench_context_parallel" 2048
  row context_parallel "attention activation MiB per rank at seq 2048: CP2 vs CP1" \
    "$(cell context_parallel 2048 3)" "$(cell context_parallel 2048 2)"
fi
if ! skipped pipeline; then
  run pipeline "$bin/titan_bench_pipeline" 6 8 1
  row pipeline "s/step at pp 2: 1F1B vs GPipe" "$(cell pipeline 1F1B 6)" "$(cell pipeline GPipe 6)"
  for schedule in InterleavedZeroBubble ZBVZeroBubble DualPipeV; do
    row pipeline "bubble at pp 2: $schedule measured vs its tick theory" \
      "$(cell pipeline "$schedule" 9)" "$(cell pipeline "$schedule" 11)"
    row pipeline "bubble at pp 2: $schedule measured vs replayed at its measured action costs" \
      "$(cell pipeline "$schedule" 9)" "$(cell pipeline "$schedule" 10)"
    row pipeline "s/step at pp 2: $schedule vs 1F1B" "$(cell pipeline "$schedule" 6)" "$(cell pipeline 1F1B 6)"
  done
  row pipeline "1F1B minor page faults per step: caching host allocator vs glibc's defaults" \
    "$(cell pipeline "caching (default)" 3)" "$(cell pipeline "system (glibc defaults)" 3)"
fi
if ! skipped moe; then
  run moe "$bin/titan_bench_moe" 6 1
  row moe "tokens/s per job: EP2 (2 ranks) vs EP1 (qwen3 MoE debug model)" "$(cell moe 2 4)" "$(cell moe 1 4)"
  row moe "fwd+bwd s: grouped GEMM vs the loop (64 experts x 256 x 768)" \
    "$(cell moe "flavor debugmodel_moe (64 x 256 x 768, top 8)" 4)" \
    "$(cell moe "flavor debugmodel_moe (64 x 256 x 768, top 8)" 3)"
fi
if ! skipped host_step; then
  run host_step env TITAN_BENCH="$bin/titan_bench_host_step" "$root/benchmarks/host_step.sh" 20 3
  row host_step "host µs/step: Titan vs PyTorch eager (1B on meta, batch 8 x seq 2048)" \
    "$(cell host_step "meta, 1B, batch 8 x seq 2048" 2)" "$(cell host_step "meta, 1B, batch 8 x seq 2048" 3)"
  row host_step "host µs/step: Titan vs PyTorch eager (CPU, dim 64 x 2 layers, batch 1 x seq 8)" \
    "$(cell host_step "CPU, dim 64 x 2 layers, batch 1 x seq 8" 2)" "$(cell host_step "CPU, dim 64 x 2 layers, batch 1 x seq 8" 3)"
  row host_step "ATen ops/step: Titan vs PyTorch eager (CPU, dim 64 x 2 layers)" \
    "$(cell host_step "CPU, dim 64 x 2 layers, batch 1 x seq 8" 5)" "$(cell host_step "CPU, dim 64 x 2 layers, batch 1 x seq 8" 6)"
fi

if ! skipped cpu_vs_pytorch; then
  run cpu_vs_pytorch env TITAN_BINARY="$bin/titan" "$root/benchmarks/cpu_vs_pytorch.sh" 20 2 2
  row cpu_vs_pytorch "tokens/s: Titan (ATen path) vs PyTorch eager (debug model, CPU, 2 threads)" \
    "$(cell cpu_vs_pytorch median 2)" "$(cell cpu_vs_pytorch median 4)"
  row cpu_vs_pytorch "tokens/s: Titan (fused CPU kernels, fused AdamW) vs PyTorch eager" \
    "$(cell cpu_vs_pytorch median 3)" "$(cell cpu_vs_pytorch median 4)"
  row cpu_vs_pytorch "tokens/s: Titan (fused CPU kernels, fused AdamW) vs PyTorch eager, fused AdamW" \
    "$(cell cpu_vs_pytorch median 3)" "$(cell cpu_vs_pytorch median 5)"
  row cpu_vs_pytorch "tokens/s: Titan (fused CPU kernels, fused AdamW) vs PyTorch with compiled blocks, fused AdamW" \
    "$(cell cpu_vs_pytorch median 3)" "$(cell cpu_vs_pytorch median 6)"
fi
if ! skipped float8_loss_gap; then
  run float8_loss_gap "$root/benchmarks/float8_loss_gap.sh" 40 "$build"
  bf16=$(awk '$1 == "bf16" { print $2 }' "$out/float8_loss_gap.txt")
  tensorwise=$(awk '$1 == "float8" && $2 == "tensorwise" { print $3 }' "$out/float8_loss_gap.txt")
  row float8_loss_gap "loss after 40 steps: float8 tensorwise (emulated) vs bf16" "$tensorwise" "$bf16"
fi
if [[ ${TITAN_BENCH_SLOW_LINK:-0} == 1 ]] && ! skipped slow_link; then
  run slow_link "$bin/titan_bench_slow_link" 1 4 1000
  echo "run_all: slow_link's table is in $out/slow_link.txt (its rows compare against the unlimited link)" >&2
fi

echo
echo "Titan benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $build"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores), load average at the start: $load_before"
echo
echo "| benchmark | what is compared | ours | reference | ours / reference | s |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "each benchmark's full output: $out"
