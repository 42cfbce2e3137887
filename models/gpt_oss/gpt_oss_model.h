// The GPT-OSS transformer: core's decoder skeleton with GPT-OSS's
// attention (biased projections, rotate-half YaRN rotary, a learned sink
// logit per head, a sliding window on every other block) and, in every
// block, core's MoE layer with a biased router and GPT-OSS's experts
// (clamped SwiGLU with biases). Plugin-private header.
#pragma once
#include "gpt_oss_args.h"
#include "titan/decoder.hpp"
#include "titan/layers.hpp"
#include "titan/moe.hpp"

namespace titan::gpt_oss {

// cos and sin of the YaRN-scaled rotary angles, fp32 [max_seq_len,
// head_dim / 2], on CPU (HF's yarn with truncate false).
std::pair<at::Tensor, at::Tensor> rope_tables(const GptOssArgs& args);

// Attention of q [batch, heads, queries, head_dim] over k, v [batch,
// kv_heads, keys, head_dim] with a sink per head (sinks [heads]): the
// softmax runs over the scaled logits and the sink's, and the sink's
// weight is dropped, so a query may attend to nothing. Query i sits at
// position first_query + i; it sees keys at or before it, within `window`
// (> 0: the last `window` positions, its own included), and of its own
// document (`documents` [batch, keys] document ids, or undefined).
at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          double scale, int64_t window, const at::Tensor& documents, int64_t first_query);

// The attention core of a GPT-OSS block (`sdpa`): sink_attention with the
// block's window. Not a titan::AttentionCore: the plugins that replace
// those (context parallelism's ring, the fused CPU kernel, selective
// checkpointing's replay) do not know sinks or windows, so they leave it,
// and context parallelism refuses a model without a core it can replace.
class SinkAttention : public torch::nn::Module {
 public:
  SinkAttention(double scale, int64_t window) : scale_(scale), window_(window) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                     const at::Tensor& documents, int64_t first_query);

 private:
  double scale_;
  int64_t window_;
};

// wq, wk, wv, wo (Linears with biases), `rope`, `sdpa` (SinkAttention) and
// the parameter `sinks` [n_heads] (split over heads by tensor parallelism).
class Attention : public DecoderAttention {
 public:
  Attention(const GptOssArgs& args, int64_t layer_id, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionContext& context) override;

 private:
  int64_t head_dim_;
};

// GPT-OSS's routed experts: mlp1_weight [E, 2F, D] and mlp1_bias [E, 2F]
// make gate and up interleaved (columns 0, 2, 4, ... gate; 1, 3, ... up),
// the gate clamped above at `limit`, up at +-limit, out = (up + 1) * gate *
// sigmoid(alpha * gate); then mlp2_weight [E, D, F] and mlp2_bias [E, D].
// One matmul per expert.
class Experts : public RoutedExperts {
 public:
  Experts(const GptOssArgs& args, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert) override;
  // mlp2_bias is added after the down projection: a width split over tp
  // would add it once per rank (refused; expert parallelism splits tokens).
  std::map<std::string, int64_t> hidden_width_dims() const override {
    return {{"mlp1_weight", 1}, {"mlp1_bias", 1}, {"mlp2_weight", 2}, {"mlp2_bias", -1}};
  }
  at::Tensor mlp1_weight, mlp1_bias, mlp2_weight, mlp2_bias;

 private:
  double alpha_, limit_;
};

// The clamped SwiGLU of interleaved gate/up columns h [rows, 2F] -> [rows, F].
at::Tensor clamped_swiglu(const at::Tensor& h, double alpha, double limit);

class Transformer : public Decoder {
 public:
  Transformer(const GptOssArgs& args, const c10::Device& device);
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;  // gpt_oss_init.cpp
  void init_buffers() override;  // gpt_oss_init.cpp
  const GptOssArgs& args() const { return args_; }

 private:
  GptOssArgs args_;
};

}  // namespace titan::gpt_oss
