#!/usr/bin/env python3
"""Titan's training steps replayed in plain PyTorch eager, as an independent reference.

Loads an HF Llama folder (config.json + *.safetensors, as `titan checkpoint
export` writes it), cuts the batches from a raw token shard as Titan's
TokenWindowLoader does (disjoint windows of seq + 1 tokens, in order), and
trains with PyTorch's own pieces: the model of benchmarks/gpu/pytorch_reference.py
(F.scaled_dot_product_attention, nn.functional) with the rotary tables of
config.json (Llama 3.1 rope scaling, which that file leaves out), F.cross_entropy,
torch.nn.utils.clip_grad_norm_, torch.optim.AdamW and a LambdaLR with
TorchTitan's warmup-stable-decay. Prints one JSON line: per step loss, grad
norm and lr, the tokens/s after the warm-up steps, and with --titan-final the
relative difference of each final parameter to Titan's.
Used by tests/integration/pytorch_reference_test.cpp and benchmarks/cpu_vs_pytorch.sh.
"""
import argparse
import json
import math
import pathlib
import struct
import sys
import time

import torch
import torch.jit._pickle
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
import pytorch_reference as ref  # noqa: E402

SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    # The format: u64 little-endian header size, a JSON header, raw bytes.
    data = path.read_bytes()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_size])
    body = bytearray(data[8 + header_size:])
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(body[begin:end], dtype=SAFETENSORS_DTYPES[entry["dtype"]]) if end > begin else \
            torch.empty(0, dtype=SAFETENSORS_DTYPES[entry["dtype"]])
        tensors[name] = flat.reshape(entry["shape"]).float()
    return tensors


def llama3_rope(head_dim, positions, theta, scaling):
    # Meta's llama3 precompute_freqs_cis with apply_scaling (models/llama3_1/model.py).
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    if scaling:
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
        scaled = []
        for freq in freqs.tolist():
            wavelen = 2 * math.pi / freq
            if wavelen < high_freq_wavelen:
                scaled.append(freq)
            elif wavelen > low_freq_wavelen:
                scaled.append(freq / factor)
            else:
                smooth = (old_context / wavelen - low) / (high - low)
                scaled.append((1 - smooth) * freq / factor + smooth * freq)
        freqs = torch.tensor(scaled, dtype=torch.float32)
    angles = torch.outer(torch.arange(positions).float(), freqs)
    return angles.cos(), angles.sin()


class Llama3(ref.Transformer):
    """The benchmark's Transformer with the rotary tables an HF config.json describes."""

    def __init__(self, config):
        dim, heads = config["hidden_size"], config["num_attention_heads"]
        args = argparse.Namespace(dim=dim, n_layers=config["num_hidden_layers"], n_heads=heads,
                                  n_kv_heads=config["num_key_value_heads"], ffn_dim=config["intermediate_size"],
                                  norm_eps=config["rms_norm_eps"], rope_theta=config["rope_theta"],
                                  vocab=config["vocab_size"])
        super().__init__(args)
        self.cos, self.sin = llama3_rope(dim // heads, config["max_position_embeddings"], config["rope_theta"],
                                         config.get("rope_scaling"))

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        return self.output(self.norm(h))


def document_positions(tokens, bos_id, eos_id):
    """Each token's position within its document: a document starts at a row's first token, at BOS, after EOS."""
    positions = torch.zeros_like(tokens)
    rows, seq = tokens.shape
    for r in range(rows):
        for i in range(1, seq):
            starts = tokens[r, i] == bos_id or tokens[r, i - 1] == eos_id
            positions[r, i] = 0 if starts else positions[r, i - 1] + 1
    return positions


class BlockCausalLlama3(Llama3):
    """Llama3 with an explicit document mask: a token sees only earlier tokens of its own document, and its
    rotary position counts from its document's start (TorchTitan's attn_mask_type: block_causal)."""

    def __init__(self, config, bos_id, eos_id):
        super().__init__(config)
        self.bos_id, self.eos_id = bos_id, eos_id

    def forward(self, tokens):
        positions = document_positions(tokens, self.bos_id, self.eos_id)
        documents = (positions == 0).cumsum(1)
        seq = tokens.shape[1]
        earlier = torch.ones(seq, seq, dtype=torch.bool).tril()
        mask = (documents[:, :, None] == documents[:, None, :]) & earlier  # [batch, query, key]
        cos, sin = self.cos[positions], self.sin[positions]  # [batch, seq, head_dim / 2]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = masked_block(layer, h, cos, sin, mask)
        return self.output(self.norm(h))


def masked_block(block, x, cos, sin, mask):
    """ref.Block.forward with per-row rotary tables and an explicit mask in the attention's softmax."""
    b, s, _ = x.shape

    def rope(t):
        pairs = t.float().reshape(b, s, t.shape[2], -1, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        c, n = cos.view(b, s, 1, -1), sin.view(b, s, 1, -1)
        return torch.stack((even * c - odd * n, even * n + odd * c), -1).flatten(3).type_as(t)

    h = block.attention_norm(x)
    q = rope(block.wq(h).view(b, s, -1, block.head_dim)).transpose(1, 2)
    k = rope(block.wk(h).view(b, s, -1, block.head_dim)).transpose(1, 2)
    v = block.wv(h).view(b, s, -1, block.head_dim).transpose(1, 2)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(block.head_dim)
    weights = scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1)
    x = x + block.wo((weights @ v).transpose(1, 2).reshape(b, s, -1))
    h = block.ffn_norm(x)
    return x + block.w2(F.silu(block.w1(h)) * block.w3(h))


def hf_to_reference(hf, config):
    """HF names and q/k row order -> the reference's (Meta's interleaved rotary pairs)."""
    def unpermute(w, heads):  # inverse of convert_llama_weights_to_hf.py's permute
        return w.view(heads, 2, w.shape[0] // heads // 2, w.shape[1]).transpose(1, 2).reshape(w.shape)

    block = {"self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv", "self_attn.o_proj": "wo",
             "mlp.gate_proj": "w1", "mlp.down_proj": "w2", "mlp.up_proj": "w3",
             "input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm"}
    out = {"tok_embeddings.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"],
           "output.weight": hf["lm_head.weight"]}
    for i in range(config["num_hidden_layers"]):
        for hf_part, part in block.items():
            w = hf[f"model.layers.{i}.{hf_part}.weight"]
            if part == "wq":
                w = unpermute(w, config["num_attention_heads"])
            elif part == "wk":
                w = unpermute(w, config["num_key_value_heads"])
            out[f"layers.{i}.{part}.weight"] = w
    return out


def titan_name(name):
    """layers.0.wq.weight -> layers.0.attention.wq.weight (Titan's module tree)."""
    parts = name.split(".")
    if parts[0] == "layers" and parts[2] in ("wq", "wk", "wv", "wo"):
        parts.insert(2, "attention")
    elif parts[0] == "layers" and parts[2] in ("w1", "w2", "w3"):
        parts.insert(2, "feed_forward")
    return ".".join(parts)


def warmup_stable_decay(steps, warmup_steps, decay_type, min_lr_factor):
    """TorchTitan's build_lr_schedulers + linear_warmup_stable_decay (decay_ratio None), as a LambdaLR lambda."""
    warmup_steps = min(warmup_steps, steps)
    decay_steps = steps - warmup_steps
    stable_steps = steps + 1 - warmup_steps - decay_steps  # TorchTitan's virtual last step

    def factor(current_step):  # 0-based
        if current_step < warmup_steps:
            return float((current_step + 1) / warmup_steps)
        if current_step < warmup_steps + stable_steps:
            return 1.0
        progress = float(current_step + 1 - warmup_steps - stable_steps) / decay_steps
        curve = {"linear": lambda: 1 - progress, "sqrt": lambda: 1 - math.sqrt(progress),
                 "cosine": lambda: 0.5 * (1.0 + math.cos(math.pi * progress))}[decay_type]()
        return min_lr_factor + (1 - min_lr_factor) * curve

    return factor


def newton_schulz_float32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz's iteration in float32 (it runs it in bfloat16)."""
    a, b, c = ns_coefficients
    x = grad.float()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if grad.size(0) > grad.size(1) else x


def read_tokens(path, count):
    dtype = torch.int32 if str(path).endswith(".u32") else torch.int16
    raw = bytearray(pathlib.Path(path).read_bytes())
    tokens = torch.frombuffer(raw, dtype=dtype).long()
    if dtype == torch.int16:
        tokens &= 0xFFFF  # uint16 ids
    if tokens.numel() < count:  # Titan's stream repeats the shard by epochs
        tokens = tokens.repeat(-(-count // tokens.numel()))
    return tokens[:count]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", required=True, type=pathlib.Path, help="HF folder: config.json + *.safetensors")
    p.add_argument("--tokens", required=True, help="raw token shard (.u16 or .u32), the run's training.dataset_path")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, default=8e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--decay-type", choices=["linear", "sqrt", "cosine"], default="linear")
    p.add_argument("--min-lr-factor", type=float, default=0.0)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--adamw", choices=["foreach", "fused"], default="foreach",
                   help="torch.optim.AdamW's implementation (fused: its one-pass kernel)")
    p.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw",
                   help="muon: torch.optim.Muon for the 2-D weights but the embedding and the head, AdamW "
                        "(--beta1, --beta2, --eps, --weight-decay) for the rest")
    p.add_argument("--muon-momentum", type=float, default=0.95)
    p.add_argument("--muon-ns-steps", type=int, default=5)
    p.add_argument("--muon-adjust-lr", choices=["original", "match_rms_adamw"], default="original")
    p.add_argument("--muon-ns-dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="float32: torch.optim.Muon's step with its Newton-Schulz iteration run in float32 "
                        "(torch runs it in bfloat16, whose roundings flip on 1e-6 differences in the input)")
    p.add_argument("--compile-blocks", action="store_true",
                   help="torch.compile each Transformer block, as TorchTitan's compile.enable does")
    p.add_argument("--timing-warmup", type=int, default=0, help="steps left out of tokens_per_sec")
    p.add_argument("--titan-final", help="Titan's debug.save_final_model file, to compare the final parameters")
    p.add_argument("--block-causal", nargs=2, type=int, metavar=("BOS_ID", "EOS_ID"),
                   help="attention masked by document (documents begin at BOS and after EOS)")
    p.add_argument("--replica-groups", type=int, default=1,
                   help="fault tolerance: the batch of each step is this many groups' (--batch each), in order")
    p.add_argument("--members", help="fault tolerance: per step, a bit mask of the groups whose gradients it "
                                      "averaged (comma-separated); the others' windows are left out")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    config = json.loads((args.hf / "config.json").read_text())
    hf = {}
    for path in sorted(args.hf.glob("*.safetensors")):
        hf.update(read_safetensors(path))
    model = BlockCausalLlama3(config, *args.block_causal) if args.block_causal else Llama3(config)
    model.load_state_dict(hf_to_reference(hf, config), strict=True)
    model.train()
    if args.compile_blocks:
        for layer in model.layers:
            layer.compile()

    params = list(model.parameters())
    adamw_params = params
    optimizers = []
    if args.optimizer == "muon" and args.muon_ns_dtype == "float32":
        torch.optim._muon._zeropower_via_newtonschulz = newton_schulz_float32
    if args.optimizer == "muon":
        def by_muon(name, param):
            return param.dim() == 2 and "tok_embeddings" not in name and "output" not in name
        named = list(model.named_parameters())
        optimizers.append(torch.optim.Muon([p for n, p in named if by_muon(n, p)], lr=args.lr,
                                           weight_decay=args.weight_decay, momentum=args.muon_momentum,
                                           nesterov=True, ns_steps=args.muon_ns_steps,
                                           adjust_lr_fn=args.muon_adjust_lr))
        adamw_params = [p for n, p in named if not by_muon(n, p)]
    optimizers.append(torch.optim.AdamW(adamw_params, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                                        weight_decay=args.weight_decay, **{args.adamw: True}))
    optimizer = optimizers[-1]
    factor = warmup_stable_decay(args.steps, args.warmup_steps, args.decay_type, args.min_lr_factor)
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in optimizers]
    window = args.seq + 1
    groups = args.replica_groups
    tokens = read_tokens(args.tokens, args.steps * groups * args.batch * window).view(args.steps, groups * args.batch,
                                                                                      window)
    masks = [int(m) for m in args.members.split(",")] if args.members else [(1 << groups) - 1] * args.steps
    if len(masks) != args.steps:
        sys.exit(f"--members has {len(masks)} masks for {args.steps} steps")

    records, step_seconds = [], []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        # Every group's windows weigh the same: the mean over the members'
        # rows is the mean of the groups' means.
        rows = tokens[step - 1].view(groups, args.batch, window)
        batch = rows[[g for g in range(groups) if masks[step - 1] >> g & 1]].flatten(0, 1)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_norm if args.max_norm > 0 else math.inf)
        lr = optimizer.param_groups[0]["lr"]
        for o in optimizers:
            o.step()
        for schedule in schedules:
            schedule.step()
        model.zero_grad(set_to_none=True)
        records.append({"step": step, "loss": loss.item(), "grad_norm": grad_norm.item(), "lr": lr})
        step_seconds.append(time.perf_counter() - start)

    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": records}
    timed = step_seconds[args.timing_warmup:]
    if timed:
        result["tokens_per_sec"] = len(timed) * args.batch * args.seq / sum(timed)
    if args.titan_final:
        # Titan's file is a LibTorch pickle of a name -> tensor dict; its one
        # non-tensor global is the type tag LibTorch writes for the dict.
        with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
            titan = torch.load(args.titan_final)
        diffs = {}
        for name, value in model.state_dict().items():
            other = titan[titan_name(name)]
            diffs[name] = ((other - value).norm() / value.norm()).item()
        result["final_param_rel_diff"] = diffs
    print(json.dumps(result))


if __name__ == "__main__":
    main()
