// The DeepSeek-V3 transformer as a titan::CausalLM: multi-head latent
// attention (MLA: low-rank q and kv projections, RoPE on a decoupled part of
// each head with one k_pe shared by all heads, YaRN beyond
// original_seq_len), and per block a dense SwiGLU (`feed_forward`, the first
// n_dense_layers) or core's MoE layer (`moe`). Plugin-private header; layers
// are core layers looked up by name at every call, so plugins swap them by
// path.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

#include "deepseek_v3_args.h"
#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan::deepseek_v3 {

// cos and sin of the rotary angles of the rope part, fp32 [max_seq_len,
// qk_rope_head_dim / 2], on CPU: TorchTitan's precompute_freqs_cis, YaRN
// included.
std::pair<at::Tensor, at::Tensor> rope_tables(const DeepSeekV3Args& args);

class Attention : public torch::nn::Module {
 public:
  Attention(const DeepSeekV3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  DeepSeekV3Args args_;
  // softmax_scale * sqrt(qk_head_dim), applied to q: the attention core
  // scales by 1/sqrt(head dim) itself (1 unless YaRN's mscale applies).
  double q_scale_;
};

class TransformerBlock : public torch::nn::Module {
 public:
  TransformerBlock(int64_t layer_id, const DeepSeekV3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  const int64_t layer_id;

 private:
  std::string ffn_name_;  // "moe" or "feed_forward"
};

class Transformer : public CausalLM {
 public:
  Transformer(const DeepSeekV3Args& args, const c10::Device& device);
  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t num_blocks() const override;
  std::shared_ptr<torch::nn::Module> block(int64_t index) override;
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // deepseek_v3_init.cpp
  void init_buffers() override;  // deepseek_v3_init.cpp
  const DeepSeekV3Args& args() const { return args_; }

 private:
  void compute_rope_tables();
  DeepSeekV3Args args_;
  torch::nn::ModuleDict layers_;
  at::Tensor freqs_cos_;
  at::Tensor freqs_sin_;
};

}  // namespace titan::deepseek_v3
