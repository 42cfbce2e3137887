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

// A multi-token prediction block (TorchTitan's MTPTransformerBlock): a
// block of the main model's last kind whose input is eh_proj(cat(enorm(the
// embeddings of the tokens k ahead), hnorm(the previous depth's hidden
// state))), and whose output is normalized by mtp_norm for the shared head
// and the next depth.
class MtpBlock : public DecoderBlock {
 public:
  MtpBlock(const DeepSeekV3Args& args, int64_t depth, const at::TensorOptions& options);
  at::Tensor forward_mtp(const at::Tensor& previous, const at::Tensor& embedded, const AttentionContext& context);
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

  // With multi-token prediction in training, first refuses what it cannot
  // go with (pipeline, context and tensor parallelism, documents).
  at::Tensor forward(const at::Tensor& tokens) override;
  using Decoder::forward;  // generation's (tokens, cache)

 protected:
  // With num_mtp_layers > 0, in training: the main logits and each depth's,
  // stacked along the batch ([(1 + depths) x batch, seq, vocab]), which the
  // model's objective splits (deepseek_v3_mtp.cpp).
  at::Tensor head(const at::Tensor& h, const at::Tensor& tokens, const AttentionContext& context) override;

 private:
  // The depth-scaled std of an output projection, the MTP blocks counting
  // on from the main ones (deepseek_v3_init.cpp).
  double output_std(const std::string& name) const;
  void check_mtp_layout(const at::Tensor& tokens) const;  // deepseek_v3_mtp.cpp
  DeepSeekV3Args args_;
};

// The training objective with multi-token prediction (TorchTitan's MTPLoss):
// the main loss plus mtp_scale times the depths' mean loss, each depth's
// loss counted over the main labels' tokens (its own labels are the main
// ones shifted left by k, the last k ignored).
CausalLM::Objective mtp_objective(int64_t depths, double scale);

}  // namespace titan::deepseek_v3
