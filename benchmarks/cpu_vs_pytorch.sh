#!/usr/bin/env bash
# Titan against PyTorch eager on CPU, in one sitting: the Llama 3 debug model
# (configs/llama3_debugmodel.yaml: dim 256, 6 blocks, the shipped tokenizer's
# vocabulary), batch 8 x seq 128, fp32, the same thread count, weights and
# tokens, trained STEPS steps by `titan train` and by the PyTorch reference
# (tests/python/llama3_reference.py), the two alternated REPEATS times.
# Titan runs twice, on its ATen path and with its fused CPU kernels
# (fused_kernels plugin + fused AdamW); PyTorch three times: eager with AdamW
# foreach and fused, and with each Transformer block under torch.compile
# (Inductor's CPU code, fused AdamW), TorchTitan's compile.enable. Prints
# tokens/s of each run after WARMUP steps, Titan's step times as fractions
# of PyTorch's (median over the repeats), every last loss with its relative
# difference to PyTorch's, the versions and the CPU.
#
# Usage: benchmarks/cpu_vs_pytorch.sh [steps (20)] [repeats (3)] [threads (2)]
# Env: TITAN_BINARY (default build/bin/titan; build-release/bin/titan for
# numbers of record), TITAN_PYTHON (default .venv/bin/python), WARMUP (3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
steps=${1:-20}
repeats=${2:-3}
threads=${3:-2}
warmup=${WARMUP:-3}
batch=8
seq=128
titan=${TITAN_BINARY:-$root/build/bin/titan}
python=${TITAN_PYTHON:-$root/.venv/bin/python}
if ((steps <= warmup)); then
  echo "cpu_vs_pytorch: steps ($steps) must exceed the $warmup warm-up steps" >&2
  exit 2
fi
for tool in "$titan" "$python"; do
  [[ -x $tool ]] || { echo "cpu_vs_pytorch: $tool not found (scripts/build.sh, scripts/setup.sh)" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/titan_cpu_vs_pytorch.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"

# The run both sides train: the debug config's optimizer and schedule.
hyper=(--set training.local_batch_size=$batch --set training.seq_len=$seq --set training.threads="$threads"
       --set training.max_norm=1.0 --set optimizer.lr=8e-4 --set optimizer.eps=1e-8
       --set optimizer.weight_decay=0.1 --set optimizer.beta1=0.9 --set optimizer.beta2=0.95
       --set lr_scheduler.warmup_steps=10 --set lr_scheduler.decay_type=linear
       --set lr_scheduler.min_lr_factor=0.1 --set metrics.log_freq=1 --set metrics.peak_flops=1e12)
reference_hyper=(--batch $batch --seq $seq --threads "$threads" --max-norm 1.0 --lr 8e-4 --eps 1e-8
                 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --warmup-steps 10 --decay-type linear
                 --min-lr-factor 0.1)

# The same starting weights: Titan's init (one step at lr 0 changes
# nothing), exported as HF safetensors, which both sides load.
"$titan" train configs/llama3_debugmodel.yaml "${hyper[@]}" --set training.steps=1 --set optimizer.lr=0 \
  --set checkpoint.enable=true --set checkpoint.interval=1 --set job.dump_folder="$work/init" \
  --log-level warn >"$work/init.log" 2>&1 || { cat "$work/init.log" >&2; exit 1; }
"$titan" checkpoint export "$work/init/checkpoint/step-1" --out "$work/hf" --log-level warn >"$work/export.log" 2>&1 ||
  { cat "$work/export.log" >&2; exit 1; }

# The same tokens: uniform ids over the vocabulary in a raw uint16 shard
# (a step's cost does not depend on which ids it sees).
"$python" - "$work/hf/config.json" "$work/tokens.u16" $((steps * batch * (seq + 1))) <<'EOF'
import json, sys
import torch
vocab = json.load(open(sys.argv[1]))["vocab_size"]
g = torch.Generator().manual_seed(0)
ids = torch.randint(vocab, (int(sys.argv[3]),), generator=g, dtype=torch.int32).to(torch.int16)
ids.numpy().tofile(sys.argv[2])  # int16 bits of ids < 32768 are their uint16 bits
EOF

# tokens/s and last loss of a titan run from its metrics.jsonl, after the warm-up steps.
titan_rate() {
  "$python" - "$1" "$warmup" $((batch * seq)) <<'EOF'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
warmup, tokens = int(sys.argv[2]), int(sys.argv[3])
seconds = lines[-1]["time_metrics/elapsed(s)"] - lines[warmup - 1]["time_metrics/elapsed(s)"]
print(f"{(len(lines) - warmup) * tokens / seconds:.1f} {lines[-1]['loss_metrics/global_avg_loss']!r}")
EOF
}

# The same from the reference's JSON line.
reference_rate() {
  "$python" - "$1" <<'EOF'
import json, sys
result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"{result['tokens_per_sec']:.1f} {result['steps'][-1]['loss']!r}")
EOF
}

# Five sides, alternated each repeat: Titan's ATen path (the config as it
# is), Titan with its CPU kernels (the fused_kernels plugin: RMSNorm, RoPE,
# SwiGLU, attention, linear + cross-entropy; AdamW's one-pass kernel),
# PyTorch eager with AdamW foreach (the reference's default) and fused, and
# PyTorch with compiled blocks (the compile happens in the warm-up steps).
fused_kernels=(--set 'plugins=[{name: fused_kernels}]' --set optimizer.implementation=fused)
declare -A tps loss
sides=(titan titan_fused torch torch_fused torch_compiled)
for ((r = 1; r <= repeats; ++r)); do
  for side in "${sides[@]}"; do
    case $side in
      titan | titan_fused)
        dump="$work/${side}_$r"
        extra=()
        [[ $side == titan_fused ]] && extra=("${fused_kernels[@]}")
        "$titan" train configs/llama3_debugmodel.yaml "${hyper[@]}" "${extra[@]}" --set training.steps="$steps" \
          --set training.dataset_path="$work/tokens.u16" --set checkpoint.initial_load_path="$work/hf" \
          --set job.dump_folder="$dump" --log-level warn >"$work/${side}_$r.log" 2>&1 ||
          { cat "$work/${side}_$r.log" >&2; exit 1; }
        read -r rate last < <(titan_rate "$dump/metrics.jsonl") ;;
      torch | torch_fused | torch_compiled)
        adamw=(--adamw foreach)
        [[ $side == torch_fused ]] && adamw=(--adamw fused)
        [[ $side == torch_compiled ]] && adamw=(--adamw fused --compile-blocks)
        "$python" tests/python/llama3_reference.py --hf "$work/hf" --tokens "$work/tokens.u16" --steps "$steps" \
          --timing-warmup "$warmup" "${adamw[@]}" "${reference_hyper[@]}" >"$work/${side}_$r.json" \
          2>"$work/${side}_$r.log" || { cat "$work/${side}_$r.log" >&2; exit 1; }
        read -r rate last < <(reference_rate "$work/${side}_$r.json") ;;
    esac
    tps[$side]+="$rate "
    loss[$side]=$last
  done
  echo "repeat $r/$repeats: $(for side in "${sides[@]}"; do printf '%s %s  ' "$side" "$(echo ${tps[$side]} | awk '{print $NF}')"; done)" >&2
done

# The CPU: vendor, model and vector ISA (benchmarks/cpu_name.sh).
source "$root/benchmarks/cpu_name.sh"
cpu=$(cpu_name)

"$python" - "$steps" "$warmup" "$threads" "$cpu" "${tps[titan]}" "${tps[titan_fused]}" "${tps[torch]}" \
  "${tps[torch_fused]}" "${tps[torch_compiled]}" "${loss[titan]}" "${loss[titan_fused]}" "${loss[torch]}" \
  "${loss[torch_fused]}" "${loss[torch_compiled]}" <<'EOF'
import statistics, sys
steps, warmup, threads, cpu = sys.argv[1:5]
titan, fused, torch_, torch_fused, compiled = ([float(x) for x in arg.split()] for arg in sys.argv[5:10])
losses = dict(zip(["titan", "titan fused", "pytorch", "pytorch fused AdamW", "pytorch compiled blocks"],
                  map(float, sys.argv[10:15])))
print(f"\nllama3 debugmodel, batch 8 x seq 128, fp32, CPU ({cpu}), {threads} threads, {steps} steps "
      f"({warmup} warm-up left out), {len(titan)} alternated repeats: tokens/s, and step time as a "
      f"fraction of PyTorch's\n")
print("| repeat | titan | titan fused | pytorch eager | pytorch eager, fused AdamW | pytorch compiled blocks "
      "| titan step / pytorch eager's | titan fused step / pytorch fused AdamW's "
      "| titan fused step / pytorch compiled's |\n|---|---|---|---|---|---|---|---|---|")
rows = list(zip(titan, fused, torch_, torch_fused, compiled))
for i, (a, f, b, bf, c) in enumerate(rows, 1):
    print(f"| {i} | {a:.0f} | {f:.0f} | {b:.0f} | {bf:.0f} | {c:.0f} | {b / a:.3f} | {bf / f:.3f} | {c / f:.3f} |")
median = statistics.median
print(f"| median | {median(titan):.0f} | {median(fused):.0f} | {median(torch_):.0f} | {median(torch_fused):.0f} | "
      f"{median(compiled):.0f} | {median(r[2] / r[0] for r in rows):.3f} | {median(r[3] / r[1] for r in rows):.3f} | "
      f"{median(r[4] / r[1] for r in rows):.3f} |")
reference = losses["pytorch"]
print("\nlast loss: " + ", ".join(f"{name} {value:.9g} (relative to pytorch {abs(value - reference) / abs(reference):.1e})"
                                  for name, value in losses.items()))
EOF
echo
"$titan" --version | head -2
"$python" -c 'import platform, torch; print(f"PyTorch {torch.__version__} (Python {platform.python_version()})")'
echo "CPU: $cpu"
