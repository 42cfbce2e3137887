#!/usr/bin/env python3
"""An MoE layer written per token in plain PyTorch, as an independent reference
for Titan's (tests/unit/moe_test.cpp): no sorting, no dispatch, no grouped
weights trickery - each token's top-k experts are run one at a time and their
outputs added with the gate values. Reads the inputs, weights, options and the
output gradient from a safetensors file, writes the output and every gradient
to another.

Usage: moe_reference.py IN.safetensors OUT.safetensors
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True


def read_safetensors(path):
    data = open(path, "rb").read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = bytearray(data[8 + size:])
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = {"F32": torch.float32, "I64": torch.int64}[entry["dtype"]]
        flat = torch.frombuffer(body[begin:end], dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"]).clone()
    return tensors, header.get("__metadata__", {})


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        raw = tensors[name].detach().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def swiglu(x, w1, w2, w3):
    return (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def main():
    t, meta = read_safetensors(sys.argv[1])
    top_k, score_func = int(meta["top_k"]), meta["score_func"]
    route_norm, route_scale = meta["route_norm"] == "1", float(meta["route_scale"])
    score_before = meta["score_before_experts"] == "1"
    groups, limited = int(meta["num_expert_groups"]), int(meta["num_limited_groups"])
    params = {k: t[k].requires_grad_() for k in ["x", "gate", "w1", "w2", "w3", "shared_w1", "shared_w2", "shared_w3"]}
    x = params["x"]
    logits = x.float() @ params["gate"].float().T
    scores = torch.softmax(logits, dim=1) if score_func == "softmax" else torch.sigmoid(logits)
    choice = (scores + t["expert_bias"]).detach()
    experts = scores.shape[1]
    out = []
    for token in range(x.shape[0]):
        c = choice[token].clone()
        if groups > 0:  # keep the `limited` groups with the largest top-2 sums
            grouped = c.view(groups, experts // groups)
            rank = grouped.topk(2, dim=1).values.sum(1)
            keep = set(rank.topk(limited).indices.tolist())
            for g in range(groups):
                if g not in keep:
                    grouped[g] = float("-inf")
        chosen = c.topk(top_k).indices.tolist()
        gates = scores[token, chosen]
        if route_norm:
            gates = gates / (gates.sum() + 1e-20)
        gates = gates * route_scale
        y = torch.zeros_like(x[token])
        for g, e in zip(gates, chosen):
            w = (params["w1"][e], params["w2"][e], params["w3"][e])
            y = y + (swiglu(g * x[token], *w) if score_before else g * swiglu(x[token], *w))
        out.append(y + swiglu(x[token], params["shared_w1"], params["shared_w2"], params["shared_w3"]))
    out = torch.stack(out)
    out.backward(t["grad_out"])
    result = {"out": out}
    result.update({"grad_" + k: v.grad for k, v in params.items()})
    write_safetensors(sys.argv[2], result)


if __name__ == "__main__":
    main()
