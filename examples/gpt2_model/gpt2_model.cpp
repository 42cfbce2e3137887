// The GPT-2 layers' forward passes and their init (GPT-2's scheme: normal
// 0.02, residual projections scaled by 1/sqrt(2 * n_layers), zero biases).
#include "gpt2_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace gpt2 {

Affine::Affine(int64_t in_features, int64_t out_features, const at::TensorOptions& options, bool with_bias) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options));
  if (with_bias) bias = register_parameter("bias", at::empty({out_features}, options));
}

at::Tensor Affine::forward(const at::Tensor& x) const { return at::linear(x, weight, bias); }

LayerNorm::LayerNorm(int64_t dim, double eps_, const at::TensorOptions& options) : eps(eps_) {
  weight = register_parameter("weight", at::empty({dim}, options));
  bias = register_parameter("bias", at::empty({dim}, options));
}

at::Tensor LayerNorm::forward(const at::Tensor& x) const {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

Block::Block(const Gpt2Args& args, const at::TensorOptions& options) : n_heads_(args.n_heads) {
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(args.dim, args.norm_eps, options));
  c_attn_ = register_module("c_attn", std::make_shared<Affine>(args.dim, 3 * args.dim, options));
  attn_proj_ = register_module("attn_proj", std::make_shared<Affine>(args.dim, args.dim, options));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(args.dim, args.norm_eps, options));
  c_fc_ = register_module("c_fc", std::make_shared<Affine>(args.dim, 4 * args.dim, options));
  mlp_proj_ = register_module("mlp_proj", std::make_shared<Affine>(4 * args.dim, args.dim, options));
}

at::Tensor Block::forward(const at::Tensor& x) const {
  int64_t batch = x.size(0), seq = x.size(1), dim = x.size(2);
  auto heads = [&](const at::Tensor& t) { return t.view({batch, seq, n_heads_, dim / n_heads_}).transpose(1, 2); };
  auto qkv = c_attn_->forward(ln_1_->forward(x)).chunk(3, -1);
  at::Tensor attended = titan::compat::causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
  at::Tensor h = x + attn_proj_->forward(attended.transpose(1, 2).reshape({batch, seq, dim}));
  // GPT-2 uses the tanh approximation of GELU.
  return h + mlp_proj_->forward(at::gelu(c_fc_->forward(ln_2_->forward(h)), "tanh"));
}

Gpt2::Gpt2(const Gpt2Args& args, const c10::Device& device) : args_(args) {
  auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  wte_ = register_parameter("wte", at::empty({args.vocab_size, args.dim}, options));
  wpe_ = register_parameter("wpe", at::empty({args.max_seq_len, args.dim}, options));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < args.n_layers; ++i) blocks_->push_back(std::make_shared<Block>(args, options));
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(args.dim, args.norm_eps, options));
  lm_head_ = register_module("lm_head", std::make_shared<Affine>(args.dim, args.vocab_size, options, false));
}

std::shared_ptr<torch::nn::Module> Gpt2::block(int64_t index) {
  if (index < 0 || index >= args_.n_layers) {
    throw titan::Error("gpt2: block " + std::to_string(index) + " out of range [0, " +
                       std::to_string(args_.n_layers) + ")");
  }
  return blocks_->ptr(index);
}

at::Tensor Gpt2::forward(const at::Tensor& tokens) {
  int64_t seq = tokens.size(1);
  if (seq > args_.max_seq_len) {
    throw titan::Error("gpt2: sequence length " + std::to_string(seq) + " exceeds model.max_seq_len " +
                       std::to_string(args_.max_seq_len));
  }
  at::Tensor h = at::embedding(wte_, tokens) + wpe_.narrow(0, 0, seq);
  for (int64_t i = 0; i < args_.n_layers; ++i) {
    const Block& block = *blocks_->ptr<Block>(i);
    // Through run_block, so plugins (activation checkpointing, FSDP) can wrap it.
    h = run_block(i, h, [&block](const at::Tensor& x) { return block.forward(x); });
  }
  return lm_head_->forward(ln_f_->forward(h));
}

namespace {

// A stable 64-bit mix (splitmix64 finalizer); std::hash is not stable.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t seed_for(uint64_t seed, const std::string& name) {
  uint64_t h = mix(seed);
  for (unsigned char c : name) h = mix(h ^ c);
  return h;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void Gpt2::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  // One generator per (seed, name): values do not depend on order or sharding.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_for(seed, name));
  bool is_norm = name.find("ln_") != std::string::npos;
  if (is_norm) {
    values.fill_(ends_with(name, ".weight") ? 1.0 : 0.0);
  } else if (ends_with(name, ".bias")) {
    values.zero_();
  } else if (ends_with(name, "attn_proj.weight") || ends_with(name, "mlp_proj.weight")) {
    // Residual projections: their sum over layers keeps the stream's scale.
    values.normal_(0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(args_.n_layers)), gen);
  } else if (name == "wte" || name == "wpe" || ends_with(name, ".weight")) {
    values.normal_(0.0, 0.02, gen);
  } else {
    throw titan::Error("gpt2: no init rule for parameter '" + name + "'");
  }
}

}  // namespace gpt2
