// Forward passes of the Qwen3 layers and the model (TorchTitan's qwen3 math).
#include "qwen3_model.h"

#include <torch/torch.h>

#include "titan/error.hpp"
#include "titan/feed_forward.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"

namespace titan::qwen3 {

std::pair<at::Tensor, at::Tensor> rope_tables(const Qwen3Args& args) {
  at::Tensor exponents = at::arange(0, args.head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(args.head_dim);
  at::Tensor freqs = at::reciprocal(at::pow(args.rope_theta, exponents));
  at::Tensor angles = at::outer(at::arange(args.max_seq_len, at::kLong).to(at::kFloat), freqs);
  return {angles.cos(), angles.sin()};
}

at::Tensor RotateHalfRotary::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t seq = x.size(1), half = x.size(3) / 2;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor first = xf.narrow(3, 0, half), second = xf.narrow(3, half, half);
  at::Tensor c = cos.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  at::Tensor s = sin.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  return at::cat({first * c - second * s, second * c + first * s}, 3).to(x.scalar_type());
}

Attention::Attention(const Qwen3Args& args, const at::TensorOptions& options) : head_dim_(args.head_dim) {
  register_module("wq", std::make_shared<Linear>(args.dim, args.n_heads * head_dim_, options));
  register_module("wk", std::make_shared<Linear>(args.dim, args.n_kv_heads * head_dim_, options));
  register_module("wv", std::make_shared<Linear>(args.dim, args.n_kv_heads * head_dim_, options));
  register_module("wo", std::make_shared<Linear>(args.n_heads * head_dim_, args.dim, options));
  register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, args.norm_eps, options));
  register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, args.norm_eps, options));
  register_module("rope", std::make_shared<RotateHalfRotary>());
  register_module("sdpa", std::make_shared<AttentionCore>());
}

at::Tensor Attention::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // Head counts from the projections' widths (tensor parallelism shards them).
  at::Tensor q = child_layer(*this, "wq")->forward(x);
  at::Tensor k = child_layer(*this, "wk")->forward(x);
  at::Tensor v = child_layer(*this, "wv")->forward(x);
  int64_t batch = q.size(0), seq = q.size(1);
  q = q.view({batch, seq, q.size(2) / head_dim_, head_dim_});
  k = k.view({batch, seq, k.size(2) / head_dim_, head_dim_});
  v = v.view({batch, seq, v.size(2) / head_dim_, head_dim_});
  // Qwen3's difference from Llama 3: each head's q and k normalized first.
  q = child_layer(*this, "q_norm")->forward(q);
  k = child_layer(*this, "k_norm")->forward(k);
  auto rope = std::dynamic_pointer_cast<Rotary>(find_module(*this, "rope"));
  if (!rope) throw Error("qwen3: rotary embedding 'rope' is missing or not a titan::Rotary");
  q = rope->forward(q, cos, sin);
  k = rope->forward(k, cos, sin);
  auto core = std::dynamic_pointer_cast<AttentionCore>(find_module(*this, "sdpa"));
  if (!core) throw Error("qwen3: attention core 'sdpa' is missing or not a titan::AttentionCore");
  at::Tensor out = core->forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  out = out.transpose(1, 2).contiguous().view({batch, seq, -1});
  return child_layer(*this, "wo")->forward(out);
}

TransformerBlock::TransformerBlock(int64_t id, const Qwen3Args& args, const at::TensorOptions& options)
    : layer_id(id), ffn_name_(args.moe ? "moe" : "feed_forward") {
  register_module("attention", std::make_shared<Attention>(args, options));
  if (args.moe) {
    register_module("moe", std::make_shared<MoE>(args.dim, args.moe_options, options));
  } else {
    register_module("feed_forward", std::make_shared<FeedForward>(args.dim, args.hidden_dim, options));
  }
  register_module("attention_norm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
  register_module("ffn_norm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
}

at::Tensor TransformerBlock::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  auto attention = std::dynamic_pointer_cast<Attention>(find_module(*this, "attention"));
  if (!attention) throw Error("qwen3: layers." + std::to_string(layer_id) + ".attention is missing or not an Attention");
  at::Tensor h = x + attention->forward(child_layer(*this, "attention_norm")->forward(x), cos, sin);
  return h + child_layer(*this, ffn_name_)->forward(child_layer(*this, "ffn_norm")->forward(h));
}

Transformer::Transformer(const Qwen3Args& args, const c10::Device& device) : args_(args) {
  auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  register_module("tok_embeddings", std::make_shared<Embedding>(args.vocab_size, args.dim, options));
  layers_ = register_module("layers", torch::nn::ModuleDict());
  for (int64_t i = 0; i < args.n_layers; ++i) {
    layers_->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
        {std::to_string(i), std::make_shared<TransformerBlock>(i, args, options)}});
  }
  register_module("norm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
  register_module("output", std::make_shared<Linear>(args.dim, args.vocab_size, options));
  freqs_cos_ = register_buffer("freqs_cos", at::empty({args.max_seq_len, args.head_dim / 2}, options));
  freqs_sin_ = register_buffer("freqs_sin", at::empty({args.max_seq_len, args.head_dim / 2}, options));
  if (!device.is_meta()) compute_rope_tables();
  add_moe_step_hook(*this);  // the trainer balances the experts before each optimizer step
}

int64_t Transformer::num_blocks() const { return static_cast<int64_t>(layers_->named_children().size()); }

std::shared_ptr<torch::nn::Module> Transformer::block(int64_t index) {
  auto blocks = layers_->named_children();
  if (index < 0 || index >= static_cast<int64_t>(blocks.size())) {
    throw Error("qwen3: block " + std::to_string(index) + " out of range [0, " + std::to_string(blocks.size()) + ")");
  }
  return blocks[index].value();
}

at::Tensor Transformer::forward(const at::Tensor& tokens) {
  // Without tok_embeddings (a later pipeline stage) the input is hidden states.
  auto embeddings = find_child_layer(*this, "tok_embeddings");
  at::Tensor h = embeddings ? embeddings->forward(tokens) : tokens;
  int64_t seq = tokens.size(1);
  at::Tensor rows = has_positions() ? positions(seq) : at::arange(seq, at::kLong);
  int64_t last = last_position(seq);
  if (last >= freqs_cos_.size(0)) {
    throw Error("qwen3: position " + std::to_string(last) + " is past the rotary tables (max_seq_len " +
                std::to_string(freqs_cos_.size(0)) + "); raise model.max_seq_len");
  }
  rows = rows.to(freqs_cos_.device());
  at::Tensor cos = freqs_cos_.index_select(0, rows), sin = freqs_sin_.index_select(0, rows);
  auto blocks = layers_->named_children();
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto block = std::dynamic_pointer_cast<TransformerBlock>(blocks[i].value());
    if (!block) throw Error("qwen3: layers." + blocks[i].key() + " is not a TransformerBlock");
    // By value: activation checkpointing runs the body again in backward.
    h = run_block(static_cast<int64_t>(i), h, [block, cos, sin](const at::Tensor& x) { return block->forward(x, cos, sin); });
  }
  if (auto norm = find_child_layer(*this, "norm")) h = norm->forward(h);
  if (auto output = find_child_layer(*this, "output")) h = output->forward(h);
  return h;
}

}  // namespace titan::qwen3
