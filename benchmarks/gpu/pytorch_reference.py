#!/usr/bin/env python3
"""PyTorch reference for benchmarks/gpu/run.sh: TorchTitan's recipe on one GPU.

A Llama 3 model of the same shapes as Titan's llama3 flavors, bf16 params with
fp32 reduce through FSDP2 on one rank (or the plain module), fused AdamW,
optional per-block torch.compile and an optional whole-step CUDA graph, on
random tokens. Prints one JSON line: tokens_per_sec, mfu, peak_memory_bytes.
Uses only what a PyTorch install has (no torchtitan, torchao or flash_attn).
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

H100_PEAK_BF16 = 989.5e12  # TorchTitan's H100 SXM peak


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim, seq, theta, device):
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(seq, device=device).float(), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    # Meta's interleaved pairs (x[2i], x[2i+1]), as Titan's llama3.
    b, s, h, d = x.shape
    pairs = x.float().reshape(b, s, h, d // 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    c, n = cos[:s].view(1, s, 1, -1), sin[:s].view(1, s, 1, -1)
    return torch.stack((even * c - odd * n, even * n + odd * c), -1).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = a.n_heads, a.n_kv_heads, a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, a.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, a.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * self.head_dim, a.dim, bias=False)
        self.w1 = nn.Linear(a.dim, a.ffn_dim, bias=False)
        self.w2 = nn.Linear(a.ffn_dim, a.dim, bias=False)
        self.w3 = nn.Linear(a.dim, a.ffn_dim, bias=False)
        self.attention_norm = RMSNorm(a.dim, a.norm_eps)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.attention_norm(x)
        q = apply_rope(self.wq(h).view(b, s, -1, self.head_dim), cos, sin).transpose(1, 2)
        k = apply_rope(self.wk(h).view(b, s, -1, self.head_dim), cos, sin).transpose(1, 2)
        v = self.wv(h).view(b, s, -1, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(out.transpose(1, 2).reshape(b, s, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok_embeddings = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layers))
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab, bias=False)
        self.head_dim, self.theta = a.dim // a.n_heads, a.rope_theta

    def forward(self, tokens):
        cos, sin = rope_tables(self.head_dim, tokens.shape[1], self.theta, tokens.device)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def ffn_hidden(dim, multiple_of, multiplier):
    hidden = int(2 * 4 * dim / 3)
    if multiplier:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


FLAVORS = {  # dim, layers, heads, kv heads, multiple_of, ffn multiplier (Titan's llama3 table)
    "debugmodel": (256, 6, 16, 16, 256, None),
    "1B": (2048, 16, 32, 8, 1024, 1.5),
    "8B": (4096, 32, 32, 8, 1024, 1.3),
}


def flops_per_token(model, a, seq):
    # TorchTitan's get_nparams_and_flops: 6 N (embedding excluded) + 12 l h q t.
    n = sum(p.numel() for p in model.parameters()) - model.tok_embeddings.weight.numel()
    return 6 * n + 12 * a.n_layers * a.n_heads * (a.dim // a.n_heads) * seq


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--flavor", choices=sorted(FLAVORS), required=True)
    p.add_argument("--n-layers", type=int, help="override the flavor's layer count")
    p.add_argument("--vocab", type=int, help="vocabulary (default: 2048 debugmodel, 128256 otherwise)")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--compile", action="store_true", help="torch.compile each transformer block")
    p.add_argument("--cuda-graph", action="store_true", help="capture the whole step in one CUDA graph (no FSDP)")
    p.add_argument("--no-fsdp", action="store_true", help="plain module with bf16 params instead of FSDP2")
    args = p.parse_args()

    dim, layers, heads, kv, multiple_of, multiplier = FLAVORS[args.flavor]
    a = argparse.Namespace(dim=dim, n_layers=args.n_layers or layers, n_heads=heads, n_kv_heads=kv,
                           ffn_dim=ffn_hidden(dim, multiple_of, multiplier), norm_eps=1e-5, rope_theta=500000.0,
                           vocab=args.vocab or (2048 if args.flavor == "debugmodel" else 128256))
    device = torch.device("cuda")
    torch.manual_seed(0)
    with torch.device(device):
        model = Transformer(a)
    fpt = flops_per_token(model, a, args.seq)
    use_fsdp = not (args.no_fsdp or args.cuda_graph)
    if use_fsdp:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29512")
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if args.compile:
        for i, layer in enumerate(model.layers):
            model.layers[i] = torch.compile(layer, fullgraph=True)
    if use_fsdp:
        for layer in model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard([model.norm, model.output], mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    else:
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=8e-4, weight_decay=0.1, fused=True,
                                  capturable=args.cuda_graph)
    tokens = torch.randint(a.vocab, (args.batch, args.seq + 1), device=device)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=not args.cuda_graph)
        return loss

    run = step
    if args.cuda_graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()

        def run():
            graph.replay()
            return static_loss

    for _ in range(args.warmup):
        run()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = run()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    tps = args.steps * args.batch * args.seq / elapsed
    print(json.dumps({"tokens_per_sec": tps, "mfu": tps * fpt / H100_PEAK_BF16,
                      "peak_memory_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss),
                      "flops_per_token": fpt, "fsdp": use_fsdp, "compile": args.compile,
                      "cuda_graph": args.cuda_graph}))
    if use_fsdp:
        torch.distributed.destroy_process_group()
    if not math.isfinite(float(loss)):
        raise SystemExit("loss is not finite")


if __name__ == "__main__":
    main()
