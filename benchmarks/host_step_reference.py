#!/usr/bin/env python3
"""PyTorch eager's side of benchmarks/host_step.sh: the host's cost of one step.

The Llama 3 model of benchmarks/gpu/pytorch_reference.py (the one the GPU
benchmark runs), trained as PyTorch users write it: forward, cross entropy,
backward, clip_grad_norm_ (foreach), AdamW (fused), zero_grad, the loss read
every step. Two places: `--device meta` (no values, no math: what is left is
the host's work, dispatch and Python, at a GPU's shapes) and `--device cpu`
(a model so small that the host's work dominates). Prints one JSON line:
microseconds per step (the median of --repeats timed windows of --steps
steps each, after --warmup steps) and ATen ops per step (the profiler's
`aten::` events in one step, nested calls included, as Titan counts them).

On meta, two choices keep the ops those of a GPU step:
- attention calls the fused kernel SDPA picks on CPU and CUDA
  (`_scaled_dot_product_flash_attention_for_cpu`, as Titan's dry run does)
  instead of the math path SDPA takes on meta;
- the foreach and fused optimizer paths are allowed on meta (PyTorch's
  device check refuses them there; their kernels have meta shapes).
Many meta kernels are written in Python (torch/_meta_registrations.py);
the time that costs is PyTorch's on meta, not on a GPU: read the CPU shape
beside it.
"""
import argparse
import collections
import json
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "gpu"))
import pytorch_reference as ref  # noqa: E402


def allow_fused_on_meta():
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils
    devices = lambda: ["cuda", "cpu", "meta"]  # noqa: E731
    foreach_utils._get_foreach_kernels_supported_devices = devices
    foreach_utils._get_fused_kernels_supported_devices = devices
    optimizer._get_fused_kernels_supported_devices = devices


def fused_attention_on_meta(q, k, v, is_causal=True, enable_gqa=False, **_):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal)[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["meta", "cpu"], required=True)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True, help="the feed-forward's hidden size")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=20, help="steps per timed window")
    p.add_argument("--repeats", type=int, default=5, help="timed windows (the median is reported)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.device == "meta":
        allow_fused_on_meta()
        ref.F.scaled_dot_product_attention = fused_attention_on_meta
    a = argparse.Namespace(dim=args.dim, n_layers=args.layers, n_heads=args.heads, n_kv_heads=args.kv_heads,
                           ffn_dim=args.ffn, norm_eps=1e-5, rope_theta=500000.0, vocab=args.vocab)
    torch.manual_seed(0)
    with torch.device(device):
        model = ref.Transformer(a)
    optimizer = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    batches = torch.randint(args.vocab, (4, args.batch, args.seq + 1)).to(device)

    def step(i):
        window = batches[i % len(batches)]
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad()
        if args.device != "meta":
            loss.item()  # what a training loop that logs its loss does every step

    for i in range(args.warmup):
        step(i)
    windows = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for i in range(args.steps):
            step(i)
        windows.append((time.perf_counter() - start) / args.steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step(0)
    ops = collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))
    print(json.dumps({"us_per_step": statistics.median(windows) * 1e6,
                      "us_per_step_all": [w * 1e6 for w in windows],
                      "aten_ops_per_step": sum(ops.values()),
                      "top_ops": ops.most_common(12)}))


if __name__ == "__main__":
    main()
