#!/usr/bin/env bash
# Titan against PyTorch eager on CPU, in one sitting: the Llama 3 debug model
# (configs/llama3_debugmodel.yaml: dim 256, 6 blocks, the shipped tokenizer's
# vocabulary), batch 8 x seq 128, fp32, the same thread count, weights and
# tokens, trained STEPS steps by `titan train` and by the PyTorch reference
# (tests/python/llama3_reference.py), the two alternated REPEATS times.
# Prints tokens/s of each run after WARMUP steps, the Titan / PyTorch ratio
# (median of the pairs), both last losses (the same computation gives the
# same numbers) and the versions.
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
print(f"{(len(lines) - warmup) * tokens / seconds:.1f} {lines[-1]['loss_metrics/global_avg_loss']:.6f}")
EOF
}

# The same from the reference's JSON line.
reference_rate() {
  "$python" - "$1" <<'EOF'
import json, sys
result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"{result['tokens_per_sec']:.1f} {result['steps'][-1]['loss']:.6f}")
EOF
}

declare -a titan_tps torch_tps
for ((r = 1; r <= repeats; ++r)); do
  dump="$work/titan_$r"
  "$titan" train configs/llama3_debugmodel.yaml "${hyper[@]}" --set training.steps="$steps" \
    --set training.dataset_path="$work/tokens.u16" --set checkpoint.initial_load_path="$work/hf" \
    --set job.dump_folder="$dump" --log-level warn >"$work/titan_$r.log" 2>&1 ||
    { cat "$work/titan_$r.log" >&2; exit 1; }
  read -r tps titan_loss < <(titan_rate "$dump/metrics.jsonl")
  titan_tps+=("$tps")
  "$python" tests/python/llama3_reference.py --hf "$work/hf" --tokens "$work/tokens.u16" --steps "$steps" \
    --timing-warmup "$warmup" "${reference_hyper[@]}" >"$work/torch_$r.json" 2>"$work/torch_$r.log" ||
    { cat "$work/torch_$r.log" >&2; exit 1; }
  read -r tps torch_loss < <(reference_rate "$work/torch_$r.json")
  torch_tps+=("$tps")
  echo "repeat $r/$repeats: titan ${titan_tps[-1]} tokens/s, pytorch ${torch_tps[-1]} tokens/s" >&2
done

"$python" - "$steps" "$warmup" "$threads" "$titan_loss" "$torch_loss" "${titan_tps[*]}" "${torch_tps[*]}" <<'EOF'
import statistics, sys
steps, warmup, threads, titan_loss, torch_loss = sys.argv[1:6]
titan = [float(x) for x in sys.argv[6].split()]
torch_ = [float(x) for x in sys.argv[7].split()]
print(f"\nllama3 debugmodel, batch 8 x seq 128, fp32, CPU, {threads} threads, {steps} steps "
      f"({warmup} warm-up left out), {len(titan)} alternated repeats\n")
print("| repeat | titan tokens/s | pytorch eager tokens/s | titan / pytorch |\n|---|---|---|---|")
for i, (a, b) in enumerate(zip(titan, torch_), 1):
    print(f"| {i} | {a:.0f} | {b:.0f} | {a / b:.3f} |")
ratios = [a / b for a, b in zip(titan, torch_)]
print(f"| median | {statistics.median(titan):.0f} | {statistics.median(torch_):.0f} | "
      f"{statistics.median(ratios):.3f} |")
print(f"\nlast loss: titan {titan_loss}, pytorch {torch_loss}")
EOF
echo
"$titan" --version | head -2
"$python" -c 'import platform, torch; print(f"PyTorch {torch.__version__} (Python {platform.python_version()})")'
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores)"
