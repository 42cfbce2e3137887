// The Qwen3 transformer as a titan::CausalLM: grouped-query attention with
// RMSNorm on each head's q and k, rotate-half rotary embedding, and per
// block a dense SwiGLU (`feed_forward`) or a MoE layer (`moe`, core's
// titan::MoE). Plugin-private header; layers are core layers looked up by
// name at every call, so plugins swap them by path.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

#include "qwen3_args.h"
#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan::qwen3 {

// cos and sin of the rotary angles, fp32 [max_seq_len, head_dim / 2], on CPU.
std::pair<at::Tensor, at::Tensor> rope_tables(const Qwen3Args& args);

// HF / Qwen's rotary layout: dims i and i + head_dim/2 rotate together
// (rotate_half), not the interleaved pairs of core's Rotary. A subclass, so
// plugins that swap exactly titan::Rotary (interleaved kernels) leave it.
class RotateHalfRotary : public Rotary {
 public:
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) override;
};

class Attention : public torch::nn::Module {
 public:
  Attention(const Qwen3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  int64_t head_dim_;
};

class TransformerBlock : public torch::nn::Module {
 public:
  TransformerBlock(int64_t layer_id, const Qwen3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  const int64_t layer_id;

 private:
  std::string ffn_name_;  // "moe" or "feed_forward"
};

class Transformer : public CausalLM {
 public:
  Transformer(const Qwen3Args& args, const c10::Device& device);
  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t num_blocks() const override;
  std::shared_ptr<torch::nn::Module> block(int64_t index) override;
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // qwen3_init.cpp
  void init_buffers() override;  // qwen3_init.cpp
  const Qwen3Args& args() const { return args_; }

 private:
  void compute_rope_tables();
  Qwen3Args args_;
  torch::nn::ModuleDict layers_;
  at::Tensor freqs_cos_;
  at::Tensor freqs_sin_;
};

}  // namespace titan::qwen3
