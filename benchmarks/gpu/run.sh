#!/usr/bin/env bash
# Single-GPU benchmark (issue 8): Titan vs PyTorch's TorchTitan recipe, same
# model shapes, batch and machine, in one call; prints tokens/s, MFU
# (TorchTitan's FLOPs formula, 989.5 TFLOP/s peak), peak memory and the
# Titan/PyTorch ratio. Needs a CUDA machine with PyTorch 2.x (the LibTorch
# Titan builds against); never run on CPU.
# Usage: benchmarks/gpu/run.sh [STEPS]
#   TITAN_CUDA_BUILD   build folder (default build-cuda; configured here if absent)
#   TITAN_LLAMA3_TOKENIZER  a Llama 3 tokenizer (128256 tokens) for the 1B/8B shapes
#   PYTORCH_MODE       compile (default: per-block torch.compile) or eager
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-30}
build=${TITAN_CUDA_BUILD:-$root/build-cuda}
mode=${PYTORCH_MODE:-compile}
out=$root/outputs/bench_gpu
mkdir -p "$out"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "benchmarks/gpu: no CUDA device")'

if [ ! -f "$build/build.ninja" ]; then  # the CUDA build recipe (LibTorch of the PyTorch install)
  prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')
  TORCH_CUDA_ARCH_LIST=9.0 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTITAN_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$prefix" \
    -DNCCL_INCLUDE_DIR="$nccl/include" -DNCCL_LIBRARY="$nccl/lib/libnccl.so.2"
fi
cmake --build "$build" -j "$(nproc)" --target titan titan_all_plugins

# name flavor n_layers seq batch; the debug model is compared with PyTorch's
# whole step in one CUDA graph, the others with per-block compile.
configs=(
  "debugmodel_s2048_b8 debugmodel 6 2048 8"
  "1B_s2048_b8 1B 16 2048 8"
  "1B_s8192_b2 1B 16 8192 2"
  "8B_4layers_s8192_b2 8B 4 8192 2"
)

run_titan() {  # name flavor layers seq batch -> metrics.jsonl in $out/titan_<name>
  local name=$1 flavor=$2 layers=$3 seq=$4 batch=$5 dir=$out/titan_$1
  local tokenizer=assets/tokenizer/stories_bpe.json
  if [ "$flavor" != debugmodel ]; then
    tokenizer=${TITAN_LLAMA3_TOKENIZER:?set TITAN_LLAMA3_TOKENIZER to a Llama 3 tokenizer for the $flavor shape}
  fi
  rm -rf "$dir"
  (cd "$root" && "$build/bin/titan" train configs/llama3_debugmodel.yaml \
    --set job.dump_folder="$dir" --set model.flavor="$flavor" --set model.n_layers="$layers" \
    --set model.tokenizer_path="$tokenizer" --set model.max_seq_len="$seq" \
    --set training.seq_len="$seq" --set training.local_batch_size="$batch" --set training.steps="$steps" \
    --set training.device=cuda --set training.mixed_precision_param=bfloat16 \
    --set metrics.log_freq=1 --set metrics.enable_jsonl=true) > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; echo "titan failed on $name (log: $dir.log)"; return 1; }
}

run_reference() {  # name flavor layers seq batch -> one JSON line in $out/pytorch_<name>.json
  local name=$1 flavor=$2 layers=$3 seq=$4 batch=$5 extra=(--compile)
  if [ "$flavor" = debugmodel ] && [ "$mode" = compile ]; then extra=(--compile --cuda-graph); fi
  if [ "$mode" = eager ]; then extra=(); fi
  python3 "$root/benchmarks/gpu/pytorch_reference.py" --flavor "$flavor" --n-layers "$layers" --seq "$seq" \
    --batch "$batch" --steps "$steps" "${extra[@]}" | tail -1 > "$out/pytorch_$name.json"
}

for config in "${configs[@]}"; do
  read -r name flavor layers seq batch <<< "$config"
  echo "== $name"
  run_titan "$name" "$flavor" "$layers" "$seq" "$batch"
  run_reference "$name" "$flavor" "$layers" "$seq" "$batch"
done

python3 - "$out" "${configs[@]}" <<'PY'
import json, sys
out, configs = sys.argv[1], sys.argv[2:]
print(f"{'config':22} {'Titan tok/s':>12} {'MFU':>6} {'peak GiB':>9} | {'PyTorch tok/s':>13} {'MFU':>6} {'peak GiB':>9} | {'ratio':>6} {'mem':>5}")
for config in configs:
    name = config.split()[0]
    steps = [json.loads(l) for l in open(f"{out}/titan_{name}/metrics.jsonl")]
    steady = steps[len(steps) // 3:]  # drop warm-up steps, as the reference does
    t_tps = sum(s["tokens_per_sec"] for s in steady) / len(steady)
    t_mfu = sum(s["mfu"] for s in steady) / len(steady)
    t_mem = max(s["memory_bytes"] for s in steps) / 2**30
    ref = json.load(open(f"{out}/pytorch_{name}.json"))
    r_mem = ref["peak_memory_bytes"] / 2**30
    print(f"{name:22} {t_tps:12.0f} {100*t_mfu:5.1f}% {t_mem:9.1f} | {ref['tokens_per_sec']:13.0f} "
          f"{100*ref['mfu']:5.1f}% {r_mem:9.1f} | {t_tps/ref['tokens_per_sec']:5.2f}x {t_mem/r_mem:4.2f}x")
PY
