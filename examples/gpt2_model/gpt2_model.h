// A GPT-2-style decoder as a titan::CausalLM: learned position embeddings,
// LayerNorm with bias, fused-QKV causal attention, GELU MLP, untied output.
// It differs from llama3 where a model plugin must adapt: other parameter
// names, biases, no rotary tables. Plugin-private header.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <string>

#include "titan/model.hpp"

namespace gpt2 {

struct Gpt2Args {
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t vocab_size = 0;  // set from the tokenizer
  int64_t max_seq_len = 1024;
  double norm_eps = 1e-5;
};

// y = x W^T (+ b), weight [out, in] as torch.nn.Linear.
class Affine : public torch::nn::Module {
 public:
  Affine(int64_t in_features, int64_t out_features, const at::TensorOptions& options, bool with_bias = true);
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight, bias;  // bias undefined when without
};

class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t dim, double eps, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight, bias;
  double eps;
};

class Block : public torch::nn::Module {
 public:
  Block(const Gpt2Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x) const;

 private:
  int64_t n_heads_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<Affine> c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

class Gpt2 : public titan::CausalLM {
 public:
  // On the meta device no memory is used; elsewhere parameters hold
  // undefined values until init_weights().
  Gpt2(const Gpt2Args& args, const c10::Device& device);
  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t num_blocks() const override { return args_.n_layers; }
  std::shared_ptr<torch::nn::Module> block(int64_t index) override;
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;
  void init_buffers() override {}  // no buffers: positions are a parameter

 private:
  Gpt2Args args_;
  at::Tensor wte_, wpe_;
  torch::nn::ModuleList blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Affine> lm_head_;
};

}  // namespace gpt2
