#!/usr/bin/env bash
# Single-GPU benchmark (issue 8): Titan vs PyTorch's TorchTitan recipe, same
# model shapes, batch and machine, in one call; prints tokens/s, MFU
# (TorchTitan's FLOPs formula, 989.5 TFLOP/s peak), peak memory and the
# Titan/PyTorch ratios against PyTorch eager, per-block torch.compile and
# (debug model only) the whole step in one CUDA graph. Needs a CUDA machine
# with PyTorch 2.x (the LibTorch Titan builds against); never run on CPU.
# On a lent GPU machine run it through `scripts/gpu_check.sh OUT bench`,
# which builds build-cuda/ with the carried C++ dependencies first.
# Usage: benchmarks/gpu/run.sh [STEPS]          (default 30 timed steps)
#   TITAN_CUDA_BUILD        build folder (default build-cuda; configured by
#                           scripts/gpu_check.sh's `configure` if absent)
#   TITAN_BENCH_CONFIGS     shapes to run, by name (default: all four below)
#   TITAN_MODES             Titan's runs: fsdp (FSDP on one rank, bf16 params,
#                           fp32 reduce), graph (no parallelizer, bf16
#                           autocast, the step in a CUDA graph). Default: both.
#                           Both with fused AdamW, logging every 10th step.
#   PYTORCH_MODES           references: eager, compile (per-block
#                           torch.compile), graph (compile + the whole step in
#                           one CUDA graph; debug model only). Default: all.
#   TITAN_LLAMA3_TOKENIZER  a Llama 3 tokenizer for the 1B/8B shapes; without
#                           one, a synthetic tiktoken file with the same
#                           vocabulary size (128,256; synthetic_tokenizer.py)
#   TITAN_BENCH_TABLE       also write the markdown table to this file
#   TITAN_PYTHON            the Python with torch (default .venv/bin/python if
#                           present, else python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-30}
build=${TITAN_CUDA_BUILD:-$root/build-cuda}
modes=${PYTORCH_MODES:-eager compile graph}
titan_modes=${TITAN_MODES:-fsdp graph}
out=$root/outputs/bench_gpu
table=${TITAN_BENCH_TABLE:-}
python=${TITAN_PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  [ -x "$root/.venv/bin/python" ] && python=$root/.venv/bin/python
fi
mkdir -p "$out"
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "benchmarks/gpu: no CUDA device")'

if [ ! -f "$build/build.ninja" ]; then  # the CUDA build recipe lives in one place
  TITAN_CUDA_BUILD=$build TITAN_PYTHON=$python bash "$root/scripts/gpu_check.sh" "$out/gpu_check" configure
fi
# LD_LIBRARY_PATH for the carried libraries, TORCH_CUDA_ARCH_LIST (gpu_check.sh).
if [ -f "$build/gpu_check/env.sh" ]; then source "$build/gpu_check/env.sh"; fi
cmake --build "$build" -j "$(nproc)" --target titan titan_all_plugins

# name flavor n_layers seq batch: the shapes of the project's GPU notes.
all_configs=(
  "debugmodel_s2048_b8 debugmodel 6 2048 8"
  "1B_s2048_b8 1B 16 2048 8"
  "1B_s8192_b2 1B 16 8192 2"
  "8B_4layers_s8192_b2 8B 4 8192 2"
)
configs=()
for config in "${all_configs[@]}"; do
  name=${config%% *}
  if [ -z "${TITAN_BENCH_CONFIGS:-}" ] || [[ " $TITAN_BENCH_CONFIGS " == *" $name "* ]]; then configs+=("$config"); fi
done
((${#configs[@]})) || { echo "benchmarks/gpu: no config matches TITAN_BENCH_CONFIGS='$TITAN_BENCH_CONFIGS'"; exit 2; }

llama3_tokenizer() {  # a Llama 3 tokenizer, or the synthetic stand-in of its size
  if [ -n "${TITAN_LLAMA3_TOKENIZER:-}" ]; then echo "$TITAN_LLAMA3_TOKENIZER"; return; fi
  local synthetic=$out/synthetic_llama3_tokenizer.model
  [ -s "$synthetic" ] || "$python" "$root/benchmarks/gpu/synthetic_tokenizer.py" "$synthetic"
  echo "$synthetic"
}

vocab_of() {  # the vocabulary size Titan reads from a tokenizer file
  "$python" - "$1" <<'PY'
import json, sys
path = sys.argv[1]
text = open(path, encoding="utf-8", errors="replace").read()
if text.lstrip().startswith("{"):  # Hugging Face tokenizer.json: the highest id + 1
    d = json.loads(text)
    ids = list(d["model"]["vocab"].values()) + [t["id"] for t in d.get("added_tokens", [])]
    print(max(ids) + 1)
else:  # tiktoken: the highest rank + 1, then Llama 3's 256 special tokens
    print(max(int(line.split()[1]) for line in text.splitlines() if line.strip()) + 1 + 256)
PY
}

run_titan() {  # name flavor layers seq batch tokenizer mode -> metrics.jsonl in $out/titan_<mode>_<name>
  local name=$1 flavor=$2 layers=$3 seq=$4 batch=$5 tokenizer=$6 mode=$7 dir=$out/titan_$7_$1 how=()
  rm -rf "$dir"
  case $mode in
    # FSDP2 on one rank with bf16 params and fp32 reduce, as the reference
    # (a device mesh: the step stays eager, training.cuda_graph says why).
    fsdp) how=(configs/llama3_debugmodel_fsdp.yaml) ;;
    # No parallelizer: fp32 weights, forward and loss under bf16 autocast,
    # the forward and backward replayed from a CUDA graph (training.cuda_graph: auto).
    graph) how=(configs/llama3_debugmodel.yaml --set training.cuda_graph=true) ;;
    *) echo "unknown TITAN_MODES entry '$mode' (fsdp, graph)"; return 1 ;;
  esac
  # Every 10th step logs (reads the loss on the host); the others never wait for the GPU.
  (cd "$root" && "$build/bin/titan" train "${how[@]}" --set training.threads=0 \
    --set job.dump_folder="$dir" --set model.flavor="$flavor" --set model.n_layers="$layers" \
    --set model.enable_weight_tying=false \
    --set model.tokenizer_path="$tokenizer" --set model.max_seq_len="$seq" \
    --set training.seq_len="$seq" --set training.local_batch_size="$batch" --set training.steps="$steps" \
    --set training.device=cuda --set training.mixed_precision_param=bfloat16 \
    --set optimizer.implementation=fused \
    --set metrics.log_freq=10 --set metrics.enable_jsonl=true) > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; echo "titan ($mode) failed on $name (log: $dir.log)"; return 1; }
}

run_reference() {  # name flavor layers seq batch vocab mode -> one JSON line in $out/pytorch_<mode>_<name>.json
  local name=$1 flavor=$2 layers=$3 seq=$4 batch=$5 vocab=$6 mode=$7 extra=()
  case $mode in
    eager) ;;
    compile) extra=(--compile) ;;
    graph) extra=(--compile --cuda-graph) ;;
    *) echo "unknown PYTORCH_MODES entry '$mode' (eager, compile, graph)"; return 1 ;;
  esac
  local result=$out/pytorch_${mode}_$name.json log=$out/pytorch_${mode}_$name.log
  # stdout alone holds the JSON line (warnings at exit go to stderr, the log).
  PYTHONUNBUFFERED=1 "$python" "$root/benchmarks/gpu/pytorch_reference.py" --flavor "$flavor" --n-layers "$layers" \
    --seq "$seq" --batch "$batch" --vocab "$vocab" --steps "$steps" "${extra[@]}" > "$result.out" 2> "$log" ||
    { tail -20 "$log"; echo "pytorch ($mode) failed on $name (log: $log)"; return 1; }
  grep '^{' "$result.out" | tail -1 > "$result"
}

# The shapes of this run and any measured earlier into $out (a lent machine
# keeps outputs/ while warm, so shapes can be split across calls), as
# markdown, to stdout and $table.
write_table() {
  "$python" - "$out" "$steps" "$modes" "$titan_modes" "${configs[*]%% *}" "${all_configs[@]}" <<'PY' > "$out/gpu_bench.md"
import glob, json, os, sys
out, steps, modes, titan_modes, selected, configs = (sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(),
                                                     sys.argv[5].split(), sys.argv[6:])
def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
def cell(tps, mfu, mem):
    return f"{tps:,.0f} ({100 * mfu:.1f}%, {mem:.1f} GiB)"
def titan_result(metrics):
    if not os.path.exists(metrics):
        return None
    steps_seen = [json.loads(l) for l in open(metrics) if l.strip()]
    steady = steps_seen[len(steps_seen) // 3:]  # drop warm-up steps, as the reference does
    if not steady:
        return None
    return (sum(s["throughput(tps)"] for s in steady) / len(steady),
            sum(s["mfu(%)"] for s in steady) / len(steady) / 100,
            max(s["memory/max_active(GiB)"] for s in steps_seen))
head = ["shape", "Titan", "Titan tok/s (MFU, peak)"]
for m in modes:
    head += [f"PyTorch {m}", f"Titan / {m} (tok/s, mem)"]
rows = []
for config in configs:
    name, flavor = config.split()[:2]
    if name not in selected and not glob.glob(f"{out}/*_{name}.json") + glob.glob(f"{out}/titan_*_{name}/metrics.jsonl"):
        continue
    for titan_mode in titan_modes:
        titan = titan_result(f"{out}/titan_{titan_mode}_{name}/metrics.jsonl")
        row = [name, titan_mode]
        row.append(cell(*titan) if titan else
                   ("failed" if os.path.exists(f"{out}/titan_{titan_mode}_{name}.log") else "not run"))
        for m in modes:
            if m == "graph" and flavor != "debugmodel":
                row += ["-", "-"]
                continue
            ref = load(f"{out}/pytorch_{m}_{name}.json")
            if not ref:
                row += ["failed" if os.path.exists(f"{out}/pytorch_{m}_{name}.log") else "not run", "-"]
                continue
            mem = ref["peak_memory_bytes"] / 2**30
            row.append(cell(ref["tokens_per_sec"], ref["mfu"], mem))
            row.append(f"{titan[0] / ref['tokens_per_sec']:.2f}x, {titan[2] / mem:.2f}x" if titan else "-")
        rows.append(row)
print(f"{steps} timed steps each; tokens/s and MFU (989.5 TFLOP/s) over the steady steps; peak = most memory allocated.")
print("Titan fsdp: FSDP on one rank, bf16 params / fp32 reduce; Titan graph: no parallelizer, bf16 autocast, "
      "the step's forward and backward in a CUDA graph; both fused AdamW.")
print()
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for row in rows:
    print("| " + " | ".join(row) + " |")
PY
  cat "$out/gpu_bench.md"
  if [ -n "$table" ]; then cp "$out/gpu_bench.md" "$table"; fi
}

status=0
for config in "${configs[@]}"; do
  read -r name flavor layers seq batch <<< "$config"
  echo "== $name"
  tokenizer=assets/tokenizer/stories_bpe.json
  [ "$flavor" = debugmodel ] || tokenizer=$(llama3_tokenizer)
  case $tokenizer in /*) vocab=$(vocab_of "$tokenizer") ;; *) vocab=$(vocab_of "$root/$tokenizer") ;; esac
  rm -rf "$out/titan_"*"_$name" "$out/titan_"*"_$name.log" "$out/pytorch_"*"_$name".*
  for titan_mode in $titan_modes; do
    run_titan "$name" "$flavor" "$layers" "$seq" "$batch" "$tokenizer" "$titan_mode" || status=1
  done
  for mode in $modes; do
    if [ "$mode" = graph ] && [ "$flavor" != debugmodel ]; then continue; fi
    run_reference "$name" "$flavor" "$layers" "$seq" "$batch" "$vocab" "$mode" || status=1
  done
  write_table > /dev/null  # after each shape, so a run cut short keeps what it measured
done
write_table
exit "$status"
