#!/usr/bin/env python3
"""The real readers of the files Titan writes, for
tests/integration/real_readers_test.cpp: TensorBoard's own event reader,
transformers' LlamaForCausalLM, Hugging Face tokenizers and safetensors.
Each subcommand reads what Titan wrote with the library alone, compares it
with what Titan says it wrote, and prints one JSON line of measurements; the
C++ test decides pass or fail.

  tensorboard JSONL TB_DIR...          every scalar of TB_DIR's event files against the JSONL file's lines
  hf-save OUT_DIR --config JSON --tokens SHARD --batch B --seq S --seed N
                                       a random LlamaForCausalLM, save_pretrained; its loss on the first batch
  hf-logits HF_DIR TITAN_LOGITS        from_pretrained(HF_DIR) logits against Titan's (tokens + logits file)
  qwen3-logits HF_DIR=TITAN_LOGITS...  the same through AutoModelForCausalLM (Qwen3, Qwen3-MoE)
  deepseek-v3-logits HF_DIR TITAN_LOGITS
                                       the same as DeepseekV3ForCausalLM, with the sensitivity to the expert
                                       bias and to the rotary pairing
  deepseek-v3-save OUT_DIR --config JSON --tokens SHARD --batch B --seq S --seed N
  qwen3-save OUT_DIR --config JSON --tokens SHARD --batch B --seq S --seed N
                                       a random DeepseekV3ForCausalLM (and expert bias), save_pretrained;
                                       its loss on the first batch
  deepseek-v3-mtp-loss HF_DIR WINDOW --scale S
                                       the training loss with multi-token prediction of HF_DIR's weights (the MTP
                                       blocks at model.layers.{n + k}) on WINDOW's tokens, from transformers'
                                       DeepseekV3 modules as TorchTitan's MTPDecoder and MTPLoss compute it
  gpt-oss-logits HF_DIR TITAN_LOGITS [--params JSON...]
                                       the same as GptOssForCausalLM, with the sensitivity to the sinks and to
                                       the sliding window; with --params, each config's parameter count
  gpt-oss-save OUT_DIR --config JSON --tokens SHARD --batch B --seq S --seed N
                                       a random GptOssForCausalLM with nonzero biases, save_pretrained; its loss
  (each *-save also takes --prompt-ids 1,2,3 --new-tokens N: then it prints its greedy generate() too)
  safetensors TITAN_FINAL HF_DIR...    every tensor of each export against Titan's saved model, bit for bit
  tokenizers TOKENIZER IDS FILE...     Tokenizer.from_file ids against Titan's (one line of ids per FILE)
"""
import argparse
import glob
import json
import math
import os
import pathlib
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree


def print_json(result):
    print(json.dumps(result, allow_nan=True))


def same_float32(tb_value, json_value):
    """TensorBoard stores float32; metrics.jsonl keeps the double it came from."""
    import numpy as np
    expected = np.float32(json_value)
    if math.isnan(expected) or math.isnan(tb_value):
        return math.isnan(expected) and math.isnan(tb_value)
    return np.float32(tb_value) == expected


def tensorboard_pair(jsonl, tb_dir):
    from tensorboard.backend.event_processing import event_accumulator

    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    written = {}  # (tag, step) -> [values], every event file of the folder
    for path in files:
        reader = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
        reader.Reload()
        for tag in reader.Tags()["scalars"]:
            for event in reader.Scalars(tag):
                written.setdefault((tag, event.step), []).append(event.value)
    expected = {}
    with open(jsonl) as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            for key, value in record.items():
                if key != "step":
                    expected.setdefault((key, record["step"]), []).append(value)
    mismatches = []
    for key in sorted(set(expected) | set(written)):
        theirs, ours = written.get(key, []), expected.get(key, [])
        if len(theirs) != len(ours) or not all(same_float32(t, o) for t, o in zip(theirs, ours)):
            mismatches.append({"tag": key[0], "step": key[1], "tensorboard": theirs, "metrics.jsonl": ours})
    return {"jsonl": jsonl, "event_files": len(files), "tensorboard_scalars": sum(map(len, written.values())),
            "jsonl_scalars": sum(map(len, expected.values())), "tags": sorted({tag for tag, _ in written}),
            "mismatches": mismatches[:20]}


def tensorboard(args):
    pairs = args.jsonl_and_tb_dir
    if len(pairs) % 2:
        sys.exit("tensorboard: expected pairs of JSONL file and TensorBoard folder")
    print_json({"runs": [tensorboard_pair(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]})


def first_batch(path, batch, seq):
    """Titan's first training batch from a raw uint16 shard: `batch` disjoint windows of seq + 1 tokens."""
    import numpy as np
    import torch
    ids = np.fromfile(path, dtype="<u2", count=batch * (seq + 1)).astype(np.int64)
    return torch.from_numpy(ids).view(batch, seq + 1)


def plain_rope_config(config, theta):
    """`config` with the rotary of plain RoPE at `theta` (no Llama 3.1 scaling): a wrong rope, for sensitivity."""
    fields = config.to_dict()
    fields.pop("rope_scaling", None)
    fields["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    return type(config).from_dict(fields)


def hf_save(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**json.loads(args.config))
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        # Trained-looking weights: at init (std 0.02) attention is nearly
        # uniform and a wrong rotary would hardly move the loss.
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif "embed" not in name:
                param.mul_(20.0 if "q_proj" in name or "k_proj" in name else 6.0)
    model.save_pretrained(args.out_dir)  # safetensors, transformers' default
    window = first_batch(args.tokens, args.batch, args.seq)
    with torch.no_grad():
        # transformers' own causal-LM loss: labels shifted inside, mean over tokens.
        loss = model(input_ids=window, labels=window).loss.item()
        # The same weights with the rotary of another theta: how far a wrong rope moves the loss.
        other = LlamaForCausalLM(plain_rope_config(config, 10000.0)).float().eval()
        other.load_state_dict(model.state_dict())
        wrong_rope_loss = other(input_ids=window, labels=window).loss.item()
    print_json({"loss": loss, "wrong_rope_loss": wrong_rope_loss, "greedy": greedy_continuation(model, args),
                "files": sorted(os.listdir(args.out_dir))})


def hf_logits(args):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, LlamaForCausalLM

    titan = load_file(args.titan_logits)
    tokens, expected = titan["tokens"].long(), titan["logits"]
    model = LlamaForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    config = AutoConfig.from_pretrained(args.hf_dir)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
        # Sensitivity: the same weights without the Llama 3.1 rope scaling.
        other = LlamaForCausalLM(plain_rope_config(config, config.rope_parameters["rope_theta"])).float().eval()
        other.load_state_dict(model.state_dict())
        wrong_rope = other(input_ids=tokens).logits
    print_json({"architecture": type(model).__name__, "shape": list(logits.shape),
                "bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
                "max_abs_diff": (logits - expected).abs().max().item(), "scale": expected.abs().max().item(),
                "wrong_rope_max_abs_diff": (wrong_rope - expected).abs().max().item()})


def qwen3_logits(args):
    """Each HF_DIR=TITAN_LOGITS pair: AutoModelForCausalLM's logits against Titan's; for a MoE model also
    with two experts of layer 0 swapped in the router (the sensitivity: expert order matters)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    results = []
    for pair in args.pairs:
        hf_dir, titan_logits = pair.split("=", 1)
        titan = load_file(titan_logits)
        tokens, expected = titan["tokens"].long(), titan["logits"]
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        result = {"architecture": type(model).__name__, "shape": None, "swapped_experts_max_abs_diff": None}
        with torch.no_grad():
            logits = model(input_ids=tokens).logits
            result["shape"] = list(logits.shape)
            result["max_abs_diff"] = (logits - expected).abs().max().item()
            result["scale"] = expected.abs().max().item()
            gate = getattr(model.model.layers[0].mlp, "gate", None)  # a MoE layer's router; dense has none
            if gate is not None and hasattr(gate, "weight") and gate.weight.shape[0] > 1:
                gate.weight[[0, 1]] = gate.weight[[1, 0]].clone()
                result["swapped_experts_max_abs_diff"] = (model(input_ids=tokens).logits - expected).abs().max().item()
        results.append(result)
    print_json({"models": results})


def deepseek_v3_logits(args):
    """from_pretrained(HF_DIR) as DeepseekV3ForCausalLM against Titan's logits; then the same weights with
    the expert bias zeroed and with the rope dims rotated as halves (rope_interleave false)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    titan = load_file(args.titan_logits)
    tokens, expected = titan["tokens"].long(), titan["logits"]
    model = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    config = AutoConfig.from_pretrained(args.hf_dir)
    result = {"architecture": type(model).__name__, "rope_type": config.rope_parameters.get("rope_type")}
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
        result["shape"] = list(logits.shape)
        result["max_abs_diff"] = (logits - expected).abs().max().item()
        result["scale"] = expected.abs().max().item()
        biases = [m.e_score_correction_bias for m in model.modules() if hasattr(m, "e_score_correction_bias")]
        result["bias_norm"] = sum(b.norm().item() for b in biases)
        saved = [b.clone() for b in biases]
        for b in biases:
            b.zero_()
        result["zero_bias_max_abs_diff"] = (model(input_ids=tokens).logits - expected).abs().max().item()
        for b, value in zip(biases, saved):
            b.copy_(value)
        model.config.rope_interleave = False
        result["halves_rope_max_abs_diff"] = (model(input_ids=tokens).logits - expected).abs().max().item()
    print_json(result)


def deepseek_v3_mtp_loss(args):
    import copy
    import glob

    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm

    config = AutoConfig.from_pretrained(args.hf_dir)
    model = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    weights = {}
    for path in sorted(glob.glob(os.path.join(args.hf_dir, "*.safetensors"))):
        weights.update(load_file(path))
    window = load_file(args.window)["tokens"].long()
    inputs, labels = window[:, :-1], window[:, 1:]
    batch, seq = inputs.shape
    n, depths = config.num_hidden_layers, config.num_nextn_predict_layers
    captured = {}
    # The main blocks' attention mask and rotary tables, and the last block's output (before the final norm).
    model.model.layers[0].register_forward_pre_hook(lambda m, a, kw: captured.update(kwargs=kw), with_kwargs=True)
    model.model.layers[n - 1].register_forward_hook(
        lambda m, a, out: captured.update(h=out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        logits = model(input_ids=inputs, use_cache=False).logits
        main_sum = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum", ignore_index=-100)
        count = (labels != -100).sum()
        previous, depth_sums = captured["h"], []
        for k in range(1, depths + 1):
            prefix = f"model.layers.{n + k - 1}."
            extra = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")
            # A copy of the last main block (its class, and the experts' implementation from_pretrained chose).
            layer = copy.deepcopy(model.model.layers[n - 1])
            block = {name[len(prefix):]: t for name, t in weights.items()
                     if name.startswith(prefix) and not name[len(prefix):].startswith(extra)}
            # transformers holds the routed experts fused ([E, 2F, D] gate then up, [E, D, F]); the checkpoint
            # has them one by one (from_pretrained converts; a layer built by hand does not).
            experts = config.n_routed_experts
            if "mlp.experts.0.gate_proj.weight" in block:
                part = lambda e, p: block.pop(f"mlp.experts.{e}.{p}.weight")
                gate_up = [torch.cat([part(e, "gate_proj"), part(e, "up_proj")], 0) for e in range(experts)]
                block["mlp.experts.gate_up_proj"] = torch.stack(gate_up)
                block["mlp.experts.down_proj"] = torch.stack([part(e, "down_proj") for e in range(experts)])
            layer.load_state_dict(block)
            enorm, hnorm, mtp_norm = (DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps) for _ in range(3))
            enorm.weight.copy_(weights[prefix + "enorm.weight"])
            hnorm.weight.copy_(weights[prefix + "hnorm.weight"])
            mtp_norm.weight.copy_(weights[prefix + "shared_head.norm.weight"])
            ahead = torch.cat([inputs[:, k:], torch.zeros(batch, k, dtype=inputs.dtype)], 1)
            valid = (torch.arange(seq) < seq - k).float().view(1, seq, 1)
            x = F.linear(torch.cat([enorm(model.model.embed_tokens(ahead)), hnorm(previous * valid)], -1),
                         weights[prefix + "eh_proj.weight"])
            out = layer(x, **captured["kwargs"])
            previous = mtp_norm(out[0] if isinstance(out, tuple) else out)
            labels_k = torch.cat([labels[:, k:], torch.full((batch, k), -100, dtype=labels.dtype)], 1)
            depth_sums.append(F.cross_entropy(model.lm_head(previous).flatten(0, 1), labels_k.flatten(),
                                              reduction="sum", ignore_index=-100))
        loss = (main_sum + args.scale * sum(depth_sums) / depths) / count
    print_json({"loss": loss.item(), "main_loss": (main_sum / count).item(),
                "depth_losses": [(d / count).item() for d in depth_sums]})


def gpt_oss_logits(args):
    """from_pretrained(HF_DIR) as GptOssForCausalLM against Titan's logits; then the same weights with the sinks
    zeroed and with every block attending to every token (no sliding window)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    titan = load_file(args.titan_logits)
    tokens, expected = titan["tokens"].long(), titan["logits"]
    model = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    result = {"architecture": type(model).__name__, "layer_types": model.config.layer_types}
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
        result["shape"] = list(logits.shape)
        result["max_abs_diff"] = (logits - expected).abs().max().item()
        result["scale"] = expected.abs().max().item()
        sinks = [m.sinks for m in model.modules() if hasattr(m, "sinks")]
        saved = [s.clone() for s in sinks]
        for s in sinks:
            s.zero_()
        result["zero_sinks_max_abs_diff"] = (model(input_ids=tokens).logits - expected).abs().max().item()
        for s, value in zip(sinks, saved):
            s.copy_(value)
        model.config.sliding_window = 10**6
        for m in model.modules():
            if hasattr(m, "sliding_window") and m.sliding_window is not None:
                m.sliding_window = 10**6
        result["no_window_max_abs_diff"] = (model(input_ids=tokens).logits - expected).abs().max().item()
    result["params"] = gpt_oss_counts(args.params)
    print_json(result)


def gpt_oss_save(args):
    """A random GPT-OSS written by transformers, every bias and sink nonzero, with its loss on Titan's first
    batch."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    model = trained_looking(GptOssForCausalLM, GptOssConfig(**json.loads(args.config)), args.seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or name.endswith("sinks"):
                param.copy_(torch.randn(param.shape) * (1.0 if name.endswith("sinks") else 0.1))
    model.save_pretrained(args.out_dir)
    window = first_batch(args.tokens, args.batch, args.seq)
    with torch.no_grad():
        loss = model(input_ids=window, labels=window).loss.item()
    print_json({"loss": loss, "greedy": greedy_continuation(model, args), "files": sorted(os.listdir(args.out_dir))})


def gpt_oss_counts(configs):
    """GptOssForCausalLM's parameter count for each config (JSON), built on meta."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    counts = []
    for text in configs:
        with torch.device("meta"):
            model = GptOssForCausalLM(GptOssConfig(**json.loads(text)))
        counts.append(sum(p.numel() for p in model.parameters()))
    return counts


def greedy_continuation(model, args):
    """transformers' greedy generate() of args.new_tokens tokens after args.prompt_ids (through its KV cache), or
    None when not asked."""
    import torch

    if not args.prompt_ids:
        return None
    prompt = torch.tensor([[int(i) for i in args.prompt_ids.split(",")]])
    with torch.no_grad():
        out = model.generate(prompt, do_sample=False, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                             attention_mask=torch.ones_like(prompt), pad_token_id=0)
    return out[0, prompt.shape[1]:].tolist()


def trained_looking(model_class, config, seed):
    """A random model of transformers' class with trained-looking weights (init's std 0.02 makes attention nearly
    uniform, so a wrong rotary or routing would hardly move the loss)."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config).float().eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif "embed" not in name:
                param.mul_(6.0)
    return model


def deepseek_v3_save(args):
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    model = trained_looking(DeepseekV3ForCausalLM, DeepseekV3Config(**json.loads(args.config)), args.seed)
    with torch.no_grad():
        # An expert bias that changes which experts are chosen.
        biases = [m.e_score_correction_bias for m in model.modules() if hasattr(m, "e_score_correction_bias")]
        for b in biases:
            b.copy_(torch.randn(b.shape) * 0.1)
    model.save_pretrained(args.out_dir)
    window = first_batch(args.tokens, args.batch, args.seq)
    with torch.no_grad():
        loss = model(input_ids=window, labels=window).loss.item()
        # The same weights with the rope dims rotated as halves, then without the expert bias.
        model.config.rope_interleave = False
        halves_rope_loss = model(input_ids=window, labels=window).loss.item()
        model.config.rope_interleave = True
        greedy = greedy_continuation(model, args)
        for b in biases:
            b.zero_()
        zero_bias_loss = model(input_ids=window, labels=window).loss.item()
    print_json({"loss": loss, "halves_rope_loss": halves_rope_loss, "zero_bias_loss": zero_bias_loss,
                "greedy": greedy,
                "biases": len(biases), "files": sorted(os.listdir(args.out_dir))})


def qwen3_save(args):
    """A random Qwen3-MoE written by transformers, with its loss on Titan's first batch."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    model = trained_looking(Qwen3MoeForCausalLM, Qwen3MoeConfig(**json.loads(args.config)), args.seed)
    model.save_pretrained(args.out_dir)
    window = first_batch(args.tokens, args.batch, args.seq)
    with torch.no_grad():
        loss = model(input_ids=window, labels=window).loss.item()
        # The same weights with two experts of layer 0 swapped in its router: how far expert order moves the loss.
        gate = model.model.layers[0].mlp.gate.weight
        gate[[0, 1]] = gate[[1, 0]].clone()
        swapped_loss = model(input_ids=window, labels=window).loss.item()
    print_json({"loss": loss, "swapped_experts_loss": swapped_loss, "files": sorted(os.listdir(args.out_dir))})


def hf_name(titan):
    """Titan's parameter name -> the HF name its export uses (HF's LlamaForCausalLM layout)."""
    block = {"attention.wq": "self_attn.q_proj", "attention.wk": "self_attn.k_proj",
             "attention.wv": "self_attn.v_proj", "attention.wo": "self_attn.o_proj",
             "feed_forward.w1": "mlp.gate_proj", "feed_forward.w2": "mlp.down_proj",
             "feed_forward.w3": "mlp.up_proj", "attention_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm"}
    top = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if titan in top:
        return top[titan]
    _, layer, rest = titan.split(".", 2)
    module, leaf = rest.rsplit(".", 1)
    return f"model.layers.{layer}.{block[module]}.{leaf}"


def safetensors_check(args):
    import torch
    import torch.jit._pickle
    from safetensors import safe_open

    with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
        titan = torch.load(args.titan_final)
    report = []
    for folder in args.hf_dirs:
        config = json.loads(pathlib.Path(folder, "config.json").read_text())
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[config["torch_dtype"]]
        heads = {"wq": config["num_attention_heads"], "wk": config["num_key_value_heads"]}
        index_path = pathlib.Path(folder, "model.safetensors.index.json")
        index = json.loads(index_path.read_text())["weight_map"] if index_path.exists() else None
        found, wrong, metadata = {}, [], set()
        for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
            with safe_open(path, framework="pt") as file:  # the library's own parser and its checks
                metadata.add(json.dumps(file.metadata(), sort_keys=True))
                for name in file.keys():
                    if index is not None and index.get(name) != os.path.basename(path):
                        wrong.append(f"{name}: in {os.path.basename(path)}, index says {index.get(name)}")
                    found[name] = file.get_tensor(name)
        for name, value in titan.items():
            expected = value.to(dtype)
            kind = name.split(".")[-2]
            if kind in heads:  # HF's convert_llama_weights_to_hf.py permute of the q/k rows
                h = heads[kind]
                expected = expected.view(h, expected.shape[0] // h // 2, 2, -1).transpose(1, 2).reshape(value.shape)
            got = found.pop(hf_name(name), None)
            if got is None:
                wrong.append(f"{hf_name(name)} ({name}) missing")
            elif got.dtype != expected.dtype or got.shape != expected.shape:
                wrong.append(f"{hf_name(name)}: {got.dtype} {list(got.shape)}, expected {expected.dtype} "
                             f"{list(expected.shape)}")
            elif got.contiguous().view(torch.uint8).numpy().tobytes() != \
                    expected.contiguous().view(torch.uint8).numpy().tobytes():
                wrong.append(f"{hf_name(name)}: bytes differ (max abs diff "
                             f"{(got.float() - expected.float()).abs().max().item()})")
        wrong += [f"{name}: not a parameter of the model" for name in found]
        if index is not None and set(index) != {hf_name(n) for n in titan}:
            wrong.append("the index's weight_map does not list exactly the model's tensors")
        report.append({"folder": folder, "dtype": config["torch_dtype"], "files": len(glob.glob(
            os.path.join(folder, "*.safetensors"))), "tensors": len(titan), "metadata": sorted(metadata),
            "problems": wrong[:20]})
    print_json({"exports": report})


def tokenizers_check(args):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(args.tokenizer)
    titan_lines = pathlib.Path(args.titan_ids).read_text().splitlines()
    report = []
    for path, line in zip(args.files, titan_lines):
        text = pathlib.Path(path).read_bytes().decode("utf-8")
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        titan = [int(i) for i in line.split()]
        first = next((i for i, (a, b) in enumerate(zip(ids, titan)) if a != b), min(len(ids), len(titan)))
        report.append({"file": path, "chars": len(text), "tokens": len(ids), "titan_tokens": len(titan),
                       "same": ids == titan, "first_difference": None if ids == titan else {
                           "index": first, "tokenizers": ids[first:first + 8], "titan": titan[first:first + 8],
                           "text": tokenizer.decode(ids[max(0, first - 4):first + 8])},
                       "decodes_back": tokenizer.decode(titan) == text})
    print_json({"vocab_size": tokenizer.get_vocab_size(with_added_tokens=True), "lines": len(titan_lines),
                "files": report})


def add_save_command(commands, name, config_class, run):
    """A command that writes a random transformers model to OUT_DIR and prints its loss on Titan's first batch."""
    p = commands.add_parser(name)
    p.add_argument("out_dir")
    p.add_argument("--config", required=True, help=f"{config_class} fields as JSON")
    p.add_argument("--tokens", required=True, help="the raw uint16 shard Titan trains on")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-ids", default="", help="comma-separated ids: also print the greedy continuation")
    p.add_argument("--new-tokens", type=int, default=8)
    p.set_defaults(run=run)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("tensorboard")
    p.add_argument("jsonl_and_tb_dir", nargs="+", help="a metrics JSONL file, then its event files' folder; repeated")
    p.set_defaults(run=tensorboard)
    add_save_command(commands, "hf-save", "LlamaConfig", hf_save)
    p = commands.add_parser("hf-logits")
    p.add_argument("hf_dir")
    p.add_argument("titan_logits", help="safetensors file with 'tokens' and Titan's 'logits'")
    p.set_defaults(run=hf_logits)
    p = commands.add_parser("qwen3-logits")
    p.add_argument("pairs", nargs="+", help="HF_DIR=TITAN_LOGITS: an export and Titan's tokens + logits")
    p.set_defaults(run=qwen3_logits)
    add_save_command(commands, "qwen3-save", "Qwen3MoeConfig", qwen3_save)
    p = commands.add_parser("deepseek-v3-logits")
    p.add_argument("hf_dir")
    p.add_argument("titan_logits", help="safetensors file with 'tokens' and Titan's 'logits'")
    p.set_defaults(run=deepseek_v3_logits)
    add_save_command(commands, "deepseek-v3-save", "DeepseekV3Config", deepseek_v3_save)
    p = commands.add_parser("deepseek-v3-mtp-loss")
    p.add_argument("hf_dir")
    p.add_argument("window", help="safetensors file with 'tokens' [batch, seq + 1]")
    p.add_argument("--scale", type=float, required=True, help="the MTP loss weight")
    p.set_defaults(run=deepseek_v3_mtp_loss)
    p = commands.add_parser("gpt-oss-logits")
    p.add_argument("hf_dir")
    p.add_argument("titan_logits", help="safetensors file with 'tokens' and Titan's 'logits'")
    p.add_argument("--params", nargs="*", default=[], help="GptOssConfig fields as JSON: also count each model's "
                                                            "parameters (built on meta)")
    p.set_defaults(run=gpt_oss_logits)
    add_save_command(commands, "gpt-oss-save", "GptOssConfig", gpt_oss_save)
    p = commands.add_parser("safetensors")
    p.add_argument("titan_final", help="Titan's model as debug.save_final_model wrote it")
    p.add_argument("hf_dirs", nargs="+")
    p.set_defaults(run=safetensors_check)
    p = commands.add_parser("tokenizers")
    p.add_argument("tokenizer")
    p.add_argument("titan_ids", help="`titan tokenizer encode` output: one line of ids per file")
    p.add_argument("files", nargs="+")
    p.set_defaults(run=tokenizers_check)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
