// The Llama 3 transformer: core's decoder skeleton with grouped-query
// attention, rotary embedding and a SwiGLU feed-forward. Plugin-private
// header. Built from core's layers (titan/layers.hpp), looked up by name at
// every call, so a plugin may swap one by path (swap_module) or drop one
// (pipeline stages).
#pragma once
#include <string>

#include "llama3_args.h"
#include "titan/decoder.hpp"

namespace titan::llama3 {

// cos and sin of the rotary angles, fp32 [max_seq_len, head_dim / 2], on CPU.
std::pair<at::Tensor, at::Tensor> rope_tables(const Llama3Args& args);

// The decoder skeleton (titan/decoder.hpp) with grouped-query attention
// (interleaved-pair rotary), a SwiGLU feed-forward in every block and Llama
// 3's rotary tables.
class Transformer : public Decoder {
 public:
  Transformer(const Llama3Args& args, const c10::Device& device);
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // llama3_init.cpp
  const Llama3Args& args() const { return args_; }

 private:
  Llama3Args args_;
};

}  // namespace titan::llama3
