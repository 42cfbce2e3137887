#!/usr/bin/env bash
# Float8 vs bf16 on the debug model, CPU (emulated float8): trains the same
# job with bf16 mixed precision and with each float8 recipe (bf16 params
# too, as TorchTitan runs float8) and prints each run's final loss and its
# gap to bf16. Not part of the test suite (minutes of CPU); the suite runs
# a short version (tests/integration/float8_e2e_test.cpp).
# Usage: benchmarks/float8_loss_gap.sh [STEPS] [BUILD_DIR]   (default 200, build);
# TITAN_BENCH_LOCK=FILE runs each job under `flock FILE` (a shared machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-200}
build=${2:-$root/build}
out=${TITAN_BENCH_OUT:-$(mktemp -d -t titan-float8-XXXXXX)}
common=(--set training.steps=$steps --set training.seq_len=64 --set training.local_batch_size=4
        --set training.threads=${TITAN_BENCH_THREADS:-2} --set metrics.log_freq=10
        --set training.mixed_precision_param=bfloat16)
run() {  # name, plugins
  ${TITAN_BENCH_LOCK:+flock "$TITAN_BENCH_LOCK"} "$build/bin/titan" train "$root/configs/llama3_debugmodel.yaml" "${common[@]}" --set job.dump_folder="$out/$1" \
    --set "plugins=[$2]" > "$out/$1.log" 2>&1 || { echo "run $1 failed: see $out/$1.log"; exit 1; }
  tail -n 1 "$out/$1/metrics.jsonl" | sed -E 's/.*"loss_metrics\/global_avg_loss":([0-9.eE+-]+).*/\1/'
}
bf16=$(run bf16 "{name: fsdp}")
printf '%-22s %-10s %s\n' run final_loss gap_vs_bf16 bf16 "$bf16" -
for recipe in tensorwise rowwise rowwise_with_gw_hp; do
  loss=$(run "$recipe" "{name: fsdp}, {name: float8, recipe_name: $recipe, param_dtype: bfloat16}")
  printf '%-22s %-10s %s\n' "float8 $recipe" "$loss" "$(python3 -c "print(f'{($loss - $bf16) / $bf16 * 100:+.2f}%')")"
done
echo "logs and metrics: $out"
