// Forward passes of the Llama 3 layers and the model (TorchTitan's math).
#include "llama3_model.h"

#include <torch/torch.h>

#include <cmath>

#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan::llama3 {

namespace {

// The registered child, so that a swapped module (replace_module) is the
// one called; null when absent (e.g. dropped on a pipeline stage).
template <class T>
std::shared_ptr<T> find_child(const torch::nn::Module& parent, const std::string& name) {
  auto children = parent.named_children();
  const auto* found = children.find(name);
  if (found == nullptr) return nullptr;
  auto typed = std::dynamic_pointer_cast<T>(*found);
  if (!typed) {
    throw Error("llama3: submodule '" + name + "' of " + parent.name() + " is a " + (*found)->name() +
                ", which does not implement the expected layer interface");
  }
  return typed;
}

template <class T>
std::shared_ptr<T> child(const torch::nn::Module& parent, const std::string& name) {
  auto found = find_child<T>(parent, name);
  if (!found) throw Error("llama3: " + parent.name() + " has no submodule '" + name + "'");
  return found;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options));
}

at::Tensor Linear::forward(const at::Tensor& input) { return at::linear(input, weight); }

Embedding::Embedding(int64_t vocab_size, int64_t dim, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({vocab_size, dim}, options));
}

at::Tensor Embedding::forward(const at::Tensor& tokens) { return at::embedding(weight, tokens); }

RMSNorm::RMSNorm(int64_t dim, double eps_, const at::TensorOptions& options) : eps(eps_) {
  weight = register_parameter("weight", at::empty({dim}, options));
}

at::Tensor RMSNorm::forward(const at::Tensor& input) {
  at::Tensor x = input.to(at::kFloat);
  at::Tensor normed = x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(input.scalar_type()) * weight;
}

std::pair<at::Tensor, at::Tensor> rope_tables(const Llama3Args& args) {
  // Same fp32 steps as TorchTitan's precompute_freqs_cis / apply_scaling.
  int64_t head_dim = args.head_dim();
  at::Tensor exponents = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor freqs = at::reciprocal(at::pow(args.rope_theta, exponents));
  if (args.rope_scaling) {
    const RopeScaling& s = args.scaling;
    double low_freq_wavelen = s.original_max_position / s.low_freq_factor;
    double high_freq_wavelen = s.original_max_position / s.high_freq_factor;
    at::Tensor wavelen = at::reciprocal(freqs) * (2 * M_PI);
    at::Tensor scaled = at::where(wavelen > low_freq_wavelen, freqs / s.factor, freqs);
    at::Tensor smooth = (at::reciprocal(wavelen) * s.original_max_position - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
    at::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
    freqs = at::where((wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen), blended, scaled);
  }
  at::Tensor positions = at::arange(args.max_seq_len, at::kLong).to(at::kFloat);
  at::Tensor angles = at::outer(positions, freqs);
  return {angles.cos(), angles.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t seq = x.size(1), half = x.size(3) / 2;
  at::Tensor pairs = x.to(at::kFloat).reshape({x.size(0), seq, x.size(2), half, 2});
  at::Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  at::Tensor c = cos.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  at::Tensor s = sin.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  at::Tensor rotated = at::stack({even * c - odd * s, even * s + odd * c}, -1);
  return rotated.flatten(3).to(x.scalar_type());
}

Attention::Attention(const Llama3Args& args, const at::TensorOptions& options) : head_dim_(args.head_dim()) {
  register_module("wq", std::make_shared<Linear>(args.dim, args.n_heads * head_dim_, options));
  register_module("wk", std::make_shared<Linear>(args.dim, args.n_kv_heads * head_dim_, options));
  register_module("wv", std::make_shared<Linear>(args.dim, args.n_kv_heads * head_dim_, options));
  register_module("wo", std::make_shared<Linear>(args.n_heads * head_dim_, args.dim, options));
}

at::Tensor Attention::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t batch = x.size(0), seq = x.size(1);
  // -1 heads: tensor parallelism may have left only the local heads.
  at::Tensor q = child<Layer>(*this, "wq")->forward(x).view({batch, seq, -1, head_dim_});
  at::Tensor k = child<Layer>(*this, "wk")->forward(x).view({batch, seq, -1, head_dim_});
  at::Tensor v = child<Layer>(*this, "wv")->forward(x).view({batch, seq, -1, head_dim_});
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  at::Tensor out = compat::causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  out = out.transpose(1, 2).contiguous().view({batch, seq, -1});
  return child<Layer>(*this, "wo")->forward(out);
}

FeedForward::FeedForward(int64_t dim, int64_t hidden_dim, const at::TensorOptions& options) {
  register_module("w1", std::make_shared<Linear>(dim, hidden_dim, options));
  register_module("w2", std::make_shared<Linear>(hidden_dim, dim, options));
  register_module("w3", std::make_shared<Linear>(dim, hidden_dim, options));
}

at::Tensor FeedForward::forward(const at::Tensor& x) {
  at::Tensor gate = at::silu(child<Layer>(*this, "w1")->forward(x));
  return child<Layer>(*this, "w2")->forward(gate * child<Layer>(*this, "w3")->forward(x));
}

TransformerBlock::TransformerBlock(int64_t id, const Llama3Args& args, const at::TensorOptions& options)
    : layer_id(id) {
  register_module("attention", std::make_shared<Attention>(args, options));
  register_module("feed_forward", std::make_shared<FeedForward>(args.dim, args.ffn_hidden_dim(), options));
  register_module("attention_norm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
  register_module("ffn_norm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
}

at::Tensor TransformerBlock::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  auto attention = child<Attention>(*this, "attention");
  at::Tensor h = x + attention->forward(child<Layer>(*this, "attention_norm")->forward(x), cos, sin);
  return h + child<Layer>(*this, "feed_forward")->forward(child<Layer>(*this, "ffn_norm")->forward(h));
}

Transformer::Transformer(const Llama3Args& args, const c10::Device& device) : args_(args) {
  auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  register_module("tok_embeddings", std::make_shared<Embedding>(args.vocab_size, args.dim, options));
  layers_ = register_module("layers", torch::nn::ModuleDict());
  for (int64_t i = 0; i < args.n_layers; ++i) {
    layers_->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
        {std::to_string(i), std::make_shared<TransformerBlock>(i, args, options)}});
  }
  register_module("norm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
  register_module("output", std::make_shared<Linear>(args.dim, args.vocab_size, options));
  freqs_cos_ = register_buffer("freqs_cos", at::empty({args.max_seq_len, args.head_dim() / 2}, options));
  freqs_sin_ = register_buffer("freqs_sin", at::empty({args.max_seq_len, args.head_dim() / 2}, options));
  if (!device.is_meta()) compute_rope_tables();
}

int64_t Transformer::num_blocks() const { return static_cast<int64_t>(layers_->named_children().size()); }

std::shared_ptr<torch::nn::Module> Transformer::block(int64_t index) {
  auto blocks = layers_->named_children();
  if (index < 0 || index >= static_cast<int64_t>(blocks.size())) {
    throw Error("llama3: block " + std::to_string(index) + " out of range [0, " + std::to_string(blocks.size()) +
                ")");
  }
  return blocks[index].value();
}

at::Tensor Transformer::forward(const at::Tensor& tokens) {
  // Without tok_embeddings (a later pipeline stage) the input is hidden states.
  auto embeddings = find_child<Layer>(*this, "tok_embeddings");
  at::Tensor h = embeddings ? embeddings->forward(tokens) : tokens;
  int64_t seq = h.size(1);
  if (seq > freqs_cos_.size(0)) {
    throw Error("llama3: sequence length " + std::to_string(seq) + " exceeds the rotary tables (max_seq_len " +
                std::to_string(freqs_cos_.size(0)) + "); raise model.max_seq_len");
  }
  at::Tensor cos = freqs_cos_.narrow(0, 0, seq), sin = freqs_sin_.narrow(0, 0, seq);
  auto blocks = layers_->named_children();
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto block = std::dynamic_pointer_cast<TransformerBlock>(blocks[i].value());
    if (!block) throw Error("llama3: layers." + blocks[i].key() + " is not a TransformerBlock");
    h = run_block(static_cast<int64_t>(i), h, [&](const at::Tensor& x) { return block->forward(x, cos, sin); });
  }
  if (auto norm = find_child<Layer>(*this, "norm")) h = norm->forward(h);
  if (auto output = find_child<Layer>(*this, "output")) h = output->forward(h);
  return h;
}

}  // namespace titan::llama3
