#!/usr/bin/env bash
# Host time per training step, Titan against PyTorch eager, in one sitting:
# microseconds the host spends on one step and ATen ops it dispatches, where
# the device costs nothing (the real step on meta tensors, at the GPU
# benchmark's shapes) and where it costs little (a CPU model of dim 64, 2
# layers, batch 1 x seq 8, 1 thread). Titan: benchmarks/host_step.cpp
# (titan_bench_host_step); PyTorch: benchmarks/host_step_reference.py, the
# same Llama 3 as the GPU benchmark's reference. Both train with fused AdamW,
# clipping at 1.0 and float32 weights; Titan logs every 10th step, PyTorch
# reads its loss every step (on CPU, a read costs no wait).
#
# The CPU cases run in `rounds` alternations of Titan and PyTorch, their
# windows pooled: a 2-core host's speed drifts by ±20% within an hour,
# which one Titan run followed by one PyTorch run would read as a ratio.
#
# Usage: benchmarks/host_step.sh [steps (20)] [repeats (5)] [rounds (3)]
# Env: TITAN_BENCH (default build/bin/titan_bench_host_step;
# build-release/bin/... for numbers of record), TITAN_PYTHON (.venv/bin/python).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
steps=${1:-20}
repeats=${2:-5}
rounds=${3:-3}
bench=${TITAN_BENCH:-$root/build/bin/titan_bench_host_step}
python=${TITAN_PYTHON:-$root/.venv/bin/python}
for tool in "$bench" "$python"; do
  [[ -x $tool ]] || { echo "host_step: $tool not found (scripts/build.sh, scripts/setup.sh)" >&2; exit 2; }
done
cd "$root"
source benchmarks/cpu_name.sh

titan_json=$("$bench" "$steps" "$repeats" meta)
reference() {  # case name, then the reference's arguments
  local name=$1; shift
  echo "{\"case\": \"$name\", \"side\": $("$python" benchmarks/host_step_reference.py --repeats "$repeats" "$@" 2>/dev/null)}"
}
vocab=$("$python" -c 'import json; print(len(json.load(open("assets/tokenizer/stories_bpe.json"))["model"]["vocab"]))')
torch_json=$(
  reference "meta debugmodel" --device meta --dim 256 --layers 6 --heads 16 --kv-heads 16 --ffn 768 \
    --vocab "$vocab" --seq 2048 --batch 8 --steps "$steps"
  reference "meta 1B" --device meta --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
    --vocab 128256 --seq 2048 --batch 8 --steps "$steps"
)
for ((round = 0; round < rounds; ++round)); do
  titan_json+=$'\n'$("$bench" "$steps" "$repeats" cpu)
  torch_json+=$'\n'$(reference "cpu small" --device cpu --dim 64 --layers 2 --heads 4 --kv-heads 4 --ffn 256 \
    --vocab "$vocab" --seq 8 --batch 1 --steps $((10 * steps)))
done

"$python" - "$(cpu_name)" "$steps" "$repeats" "$rounds" "$titan_json" "$torch_json" <<'PYEOF'
import json, statistics, sys
import torch
cpu, steps, repeats, rounds = sys.argv[1:5]


def pooled(records):
    """One record per case: every round's windows pooled, their median."""
    cases = {}
    for case, record in records:
        merged = cases.setdefault(case, {"windows": [], "aten_ops_per_step": record["aten_ops_per_step"]})
        merged["windows"] += record["us_per_step_all"]
    for merged in cases.values():
        merged["us_per_step"] = statistics.median(merged["windows"])
    return cases


titan = pooled((r["case"], r) for r in map(json.loads, filter(None, sys.argv[5].splitlines())))
torch_side = pooled((r["case"], r["side"]) for r in map(json.loads, filter(None, sys.argv[6].splitlines())))
print(f"\nhost time per step, llama3, fp32, fused AdamW, 1 thread; median of {repeats} windows on meta, "
      f"of {rounds} x {repeats} windows on CPU (Titan and PyTorch alternated {rounds} times); "
      f"CPU: {cpu}; torch {torch.__version__}")
print("| case | Titan µs/step | PyTorch eager µs/step | ratio | Titan ATen ops/step | PyTorch ATen ops/step | ratio |")
print("|---|---|---|---|---|---|---|")
shapes = {"meta debugmodel": "meta, debugmodel, batch 8 x seq 2048",
          "meta 1B": "meta, 1B, batch 8 x seq 2048",
          "cpu small": "CPU, dim 64 x 2 layers, batch 1 x seq 8",
          "cpu small fused_kernels": "CPU, the same, Titan's fused_kernels"}
for case, label in shapes.items():
    t = titan[case]
    p = torch_side[case.replace(" fused_kernels", "")]
    print(f"| {label} | {t['us_per_step']:.0f} | {p['us_per_step']:.0f} | {t['us_per_step'] / p['us_per_step']:.2f} "
          f"| {t['aten_ops_per_step']:.0f} | {p['aten_ops_per_step']:.0f} "
          f"| {t['aten_ops_per_step'] / p['aten_ops_per_step']:.2f} |")
print("\nOn meta, PyTorch runs many shape functions in Python (torch/_meta_registrations.py and the "
      "_refs decompositions), which a GPU step does not: read its meta time as an upper bound.")
PYEOF
