// The Llama 3 transformer as a titan::CausalLM: RMSNorm, rotary embedding,
// grouped-query attention, SwiGLU feed-forward, blocks run via run_block().
// Plugin-private header. Built from core's layers (titan/layers.hpp), looked
// up by name at every call, so a plugin may swap one by path (swap_module) or
// drop one (pipeline stages).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

#include <string>

#include "llama3_args.h"
#include "titan/feed_forward.hpp"
#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan::llama3 {

// cos and sin of the rotary angles, fp32 [max_seq_len, head_dim / 2], on CPU.
std::pair<at::Tensor, at::Tensor> rope_tables(const Llama3Args& args);
class Attention : public torch::nn::Module {
 public:
  Attention(const Llama3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  int64_t head_dim_;
};

class TransformerBlock : public torch::nn::Module {
 public:
  TransformerBlock(int64_t layer_id, const Llama3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  const int64_t layer_id;
};

class Transformer : public CausalLM {
 public:
  // On the meta device no memory is used; elsewhere the rotary tables are
  // computed and the parameters hold undefined values until init_weights().
  Transformer(const Llama3Args& args, const c10::Device& device);
  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t num_blocks() const override;
  std::shared_ptr<torch::nn::Module> block(int64_t index) override;
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // llama3_init.cpp
  void init_buffers() override;
  const Llama3Args& args() const { return args_; }

 private:
  void compute_rope_tables();
  Llama3Args args_;
  torch::nn::ModuleDict layers_;
  at::Tensor freqs_cos_;
  at::Tensor freqs_sin_;
};

}  // namespace titan::llama3
