// The Qwen3 transformer: core's decoder skeleton with grouped-query
// attention (RMSNorm on each head's q and k, rotate-half rotary embedding),
// and per block a dense SwiGLU (`feed_forward`) or a MoE layer (`moe`,
// core's titan::MoE). Plugin-private header; layers are core layers looked
// up by name at every call, so plugins swap them by path.
#pragma once
#include "qwen3_args.h"
#include "titan/decoder.hpp"
#include "titan/layers.hpp"

namespace titan::qwen3 {

// cos and sin of the rotary angles, fp32 [max_seq_len, head_dim / 2], on CPU.
std::pair<at::Tensor, at::Tensor> rope_tables(const Qwen3Args& args);

// The decoder skeleton (titan/decoder.hpp) with grouped-query attention
// (q/k norms, rotate-half rotary), a dense SwiGLU (`feed_forward`) or core's
// MoE layer (`moe`) in every block, and its rotary tables.
class Transformer : public Decoder {
 public:
  Transformer(const Qwen3Args& args, const c10::Device& device);
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // qwen3_init.cpp
  void init_buffers() override;  // qwen3_init.cpp
  const Qwen3Args& args() const { return args_; }

 private:
  Qwen3Args args_;
};

}  // namespace titan::qwen3
