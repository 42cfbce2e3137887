#!/usr/bin/env python3
"""Qwen3's forward written from its definition in plain PyTorch, as an
independent reference for Titan's qwen3 plugin (tests/plugins/qwen3_test.cpp):
RMSNorm on each head's q and k, HF's rotate_half rotary embedding, GQA through
F.scaled_dot_product_attention, and per block either a SwiGLU or a MoE run one
token at a time (softmax router, top-k on scores + expert bias, route_norm,
gate values on the experts' outputs). Reads Titan's parameters (by Titan's
names), the tokens and the shape from a safetensors file; writes the logits.

Usage: qwen3_reference.py IN.safetensors OUT.safetensors [IN2 OUT2 ...]
"""
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from moe_reference import read_safetensors, swiglu, write_safetensors  # noqa: E402


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def moe(x, p, prefix, top_k):
    scores = torch.softmax(x @ p[prefix + "router.gate.weight"].T, dim=-1)
    choice = scores + p[prefix + "router.expert_bias"]
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        chosen = choice[t].topk(top_k).indices.tolist()
        gates = scores[t, chosen]
        gates = gates / (gates.sum() + 1e-20)
        for g, e in zip(gates, chosen):
            w = [p[prefix + "experts." + n][e] for n in ("w1", "w2", "w3")]
            out[t] += g * swiglu(x[t], *w)
    return out


def forward(p, meta):
    layers, heads, kv_heads = int(meta["n_layers"]), int(meta["n_heads"]), int(meta["n_kv_heads"])
    head_dim, eps, theta = int(meta["head_dim"]), float(meta["norm_eps"]), float(meta["rope_theta"])
    tokens = p["tokens"]
    batch, seq = tokens.shape
    h = p["tok_embeddings.weight"][tokens]
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), freqs)
    cos = torch.cat([angles.cos(), angles.cos()], -1).view(1, seq, 1, head_dim)
    sin = torch.cat([angles.sin(), angles.sin()], -1).view(1, seq, 1, head_dim)
    for layer in range(layers):
        b = "layers.%d." % layer
        x = rms_norm(h, p[b + "attention_norm.weight"], eps)
        q = (x @ p[b + "attention.wq.weight"].T).view(batch, seq, heads, head_dim)
        k = (x @ p[b + "attention.wk.weight"].T).view(batch, seq, kv_heads, head_dim)
        v = (x @ p[b + "attention.wv.weight"].T).view(batch, seq, kv_heads, head_dim)
        q = rms_norm(q, p[b + "attention.q_norm.weight"], eps)
        k = rms_norm(k, p[b + "attention.k_norm.weight"], eps)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t.repeat_interleave(heads // kv_heads, dim=2) for t in (k, v))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = h + o.transpose(1, 2).reshape(batch, seq, -1) @ p[b + "attention.wo.weight"].T
        x = rms_norm(h, p[b + "ffn_norm.weight"], eps)
        if meta["moe"] == "1":
            y = moe(x.reshape(-1, x.shape[-1]), p, b + "moe.", int(meta["top_k"])).view_as(x)
        else:
            y = swiglu(x, *(p[b + "feed_forward.%s.weight" % n] for n in ("w1", "w2", "w3")))
        h = h + y
    return rms_norm(h, p["norm.weight"], eps) @ p["output.weight"].T


def main():
    for i in range(1, len(sys.argv), 2):
        params, meta = read_safetensors(sys.argv[i])
        with torch.no_grad():
            write_safetensors(sys.argv[i + 1], {"logits": forward(params, meta)})


if __name__ == "__main__":
    main()
