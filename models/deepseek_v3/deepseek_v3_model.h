// The DeepSeek-V3 transformer, core's decoder skeleton with multi-head latent
// attention (MLA: low-rank q and kv projections, RoPE on a decoupled part of
// each head with one k_pe shared by all heads, YaRN beyond
// original_seq_len), and per block a dense SwiGLU (`feed_forward`, the first
// n_dense_layers) or core's MoE layer (`moe`). Plugin-private header; layers
// are core layers looked up by name at every call, so plugins swap them by
// path.
#pragma once
#include "deepseek_v3_args.h"
#include "titan/decoder.hpp"
#include "titan/layers.hpp"

namespace titan::deepseek_v3 {

// cos and sin of the rotary angles of the rope part, fp32 [max_seq_len,
// qk_rope_head_dim / 2], on CPU: TorchTitan's precompute_freqs_cis, YaRN
// included.
std::pair<at::Tensor, at::Tensor> rope_tables(const DeepSeekV3Args& args);

class Attention : public DecoderAttention {
 public:
  Attention(const DeepSeekV3Args& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionContext& context) override;

 private:
  DeepSeekV3Args args_;
  // softmax_scale * sqrt(qk_head_dim), applied to q: the attention core
  // scales by 1/sqrt(head dim) itself (1 unless YaRN's mscale applies).
  double q_scale_;
};

// The decoder skeleton (titan/decoder.hpp) with MLA, a dense SwiGLU
// (`feed_forward`, the first n_dense_layers) or core's MoE layer (`moe`) in
// every block, and the YaRN rotary tables.
class Transformer : public Decoder {
 public:
  Transformer(const DeepSeekV3Args& args, const c10::Device& device);
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // deepseek_v3_init.cpp
  void init_buffers() override;  // deepseek_v3_init.cpp
  const DeepSeekV3Args& args() const { return args_; }

 private:
  DeepSeekV3Args args_;
};

}  // namespace titan::deepseek_v3
