// Forward passes of the GPT-OSS layers (HF's GptOss and TorchTitan's
// gpt_oss math): YaRN tables, attention with sinks and sliding windows,
// the experts' clamped SwiGLU.
#include "gpt_oss_model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "titan/error.hpp"
#include "titan/module_path.hpp"

namespace titan::gpt_oss {

namespace {

// YaRN's correction dim: where `rotations` full turns fit in the original
// context (HF's find_correction_dim).
double correction_dim(double rotations, double dim, double base, double seq_len) {
  return dim * std::log(seq_len / (rotations * 2 * M_PI)) / (2 * std::log(base));
}

}  // namespace

std::pair<at::Tensor, at::Tensor> rope_tables(const GptOssArgs& args) {
  const int64_t dim = args.head_dim;
  at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor freqs = at::reciprocal(at::pow(args.rope_theta, exponents));
  if (args.rope_factor > 1.0) {
    // No floor/ceil of the range (truncate: false in every GPT-OSS config).
    const double d = static_cast<double>(dim), base = args.rope_theta, original = static_cast<double>(args.original_seq_len);
    double low = std::max(correction_dim(args.beta_fast, d, base, original), 0.0);
    double high = std::min(correction_dim(args.beta_slow, d, base, original), d - 1);
    if (low == high) high += 0.001;
    at::Tensor ramp = at::clamp((at::arange(dim / 2, at::kLong).to(at::kFloat) - low) / (high - low), 0, 1);
    freqs = freqs / args.rope_factor * ramp + freqs * (1 - ramp);
  }
  at::Tensor angles = at::outer(at::arange(args.max_seq_len, at::kLong).to(at::kFloat), freqs);
  return {angles.cos(), angles.sin()};
}

at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          double scale, int64_t window, const at::Tensor& documents, int64_t first_query) {
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), keys = k.size(2);
  const int64_t group = heads / k.size(1);
  // Each key/value head serves `group` consecutive query heads (HF's repeat_kv).
  at::Tensor key = group > 1 ? k.repeat_interleave(group, 1) : k;
  at::Tensor value = group > 1 ? v.repeat_interleave(group, 1) : v;
  at::Tensor logits = at::matmul(q.to(at::kFloat), key.to(at::kFloat).transpose(-2, -1)) * scale;
  const at::TensorOptions positions = at::TensorOptions().dtype(at::kLong).device(q.device());
  at::Tensor query_pos = at::arange(first_query, first_query + queries, positions).unsqueeze(1);
  at::Tensor key_pos = at::arange(keys, positions).unsqueeze(0);
  at::Tensor visible = key_pos <= query_pos;  // [queries, keys]
  if (window > 0) visible = visible & (query_pos - key_pos < window);
  visible = visible.view({1, 1, queries, keys});
  if (documents.defined()) {
    at::Tensor query_docs = documents.narrow(1, first_query, queries);
    visible = visible & (query_docs.unsqueeze(2) == documents.unsqueeze(1)).unsqueeze(1);
  }
  logits = logits.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor sink = sinks.to(at::kFloat).view({1, heads, 1, 1}).expand({batch, heads, queries, 1});
  at::Tensor weights = at::softmax(at::cat({logits, sink}, -1), -1).narrow(-1, 0, keys);
  return at::matmul(weights.to(value.scalar_type()), value);
}

at::Tensor SinkAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& sinks, const at::Tensor& documents, int64_t first_query) {
  return sink_attention(q, k, v, sinks, scale_, window_, documents, first_query);
}

Attention::Attention(const GptOssArgs& args, int64_t layer_id, const at::TensorOptions& options)
    : head_dim_(args.head_dim) {
  const int64_t q_width = args.n_heads * args.head_dim, kv_width = args.n_kv_heads * args.head_dim;
  register_module("wq", std::make_shared<Linear>(args.dim, q_width, options, /*bias=*/true));
  register_module("wk", std::make_shared<Linear>(args.dim, kv_width, options, /*bias=*/true));
  register_module("wv", std::make_shared<Linear>(args.dim, kv_width, options, /*bias=*/true));
  register_module("wo", std::make_shared<Linear>(q_width, args.dim, options, /*bias=*/true));
  register_module("rope", std::make_shared<RotateHalfRotary>());
  register_module("sdpa", std::make_shared<SinkAttention>(args.softmax_scale(),
                                                          args.sliding(layer_id) ? args.sliding_window : 0));
  register_parameter("sinks", at::empty({args.n_heads}, options));
}

at::Tensor Attention::forward(const at::Tensor& x, const AttentionContext& context) {
  // Head counts from the widths: tensor parallelism shards the projections
  // and the sinks over heads alike.
  at::Tensor q = child_layer(*this, "wq")->forward(x);
  at::Tensor k = child_layer(*this, "wk")->forward(x);
  at::Tensor v = child_layer(*this, "wv")->forward(x);
  const int64_t batch = q.size(0), seq = q.size(1);
  q = q.view({batch, seq, -1, head_dim_});
  k = k.view({batch, seq, -1, head_dim_});
  v = v.view({batch, seq, -1, head_dim_});
  auto rope = std::dynamic_pointer_cast<Rotary>(find_module(*this, "rope"));
  if (!rope) throw Error("gpt_oss: rotary embedding 'rope' is missing or not a titan::Rotary");
  q = rope->forward(q, context.cos, context.sin).transpose(1, 2);
  k = rope->forward(k, context.cos, context.sin).transpose(1, 2);
  v = v.transpose(1, 2);
  auto core = std::dynamic_pointer_cast<SinkAttention>(find_module(*this, "sdpa"));
  if (!core) throw Error("gpt_oss: attention core 'sdpa' is missing or not gpt_oss's SinkAttention");
  const at::Tensor local_sinks = named_parameters(/*recurse=*/false)["sinks"];
  at::Tensor out;
  if (context.cache) {
    // Generation: this forward's queries follow the cached tokens.
    const int64_t first = context.cache->length();
    auto [keys, values] = context.cache->append(context.layer, k, v);
    out = core->forward(q, keys, values, local_sinks, at::Tensor(), first);
  } else {
    out = core->forward(q, k, v, local_sinks, context.documents, 0);
  }
  out = out.transpose(1, 2).contiguous().view({batch, seq, -1});
  return child_layer(*this, "wo")->forward(out);
}

at::Tensor clamped_swiglu(const at::Tensor& h, double alpha, double limit) {
  const int64_t width = h.size(-1);
  at::Tensor gate = h.slice(-1, 0, width, 2).clamp_max(limit);
  at::Tensor up = h.slice(-1, 1, width, 2).clamp(-limit, limit);
  return (up + 1) * (gate * at::sigmoid(gate * alpha));
}

Experts::Experts(const GptOssArgs& args, const at::TensorOptions& options)
    : alpha_(args.swiglu_alpha), limit_(args.swiglu_limit) {
  const MoEOptions& m = args.moe_options;
  mlp1_weight = register_parameter("mlp1_weight", at::empty({m.num_experts, 2 * m.hidden_dim, args.dim}, options));
  mlp1_bias = register_parameter("mlp1_bias", at::empty({m.num_experts, 2 * m.hidden_dim}, options));
  mlp2_weight = register_parameter("mlp2_weight", at::empty({m.num_experts, args.dim, m.hidden_dim}, options));
  mlp2_bias = register_parameter("mlp2_bias", at::empty({m.num_experts, args.dim}, options));
}

at::Tensor Experts::forward(const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert) {
  int64_t rows = 0;
  for (int64_t count : tokens_per_expert) rows += count;
  if (static_cast<int64_t>(tokens_per_expert.size()) != mlp1_weight.size(0) || rows != tokens.size(0)) {
    throw Error("gpt_oss experts: " + std::to_string(tokens_per_expert.size()) + " groups of " + std::to_string(rows) +
                " rows for " + std::to_string(mlp1_weight.size(0)) + " experts and " + std::to_string(tokens.size(0)) +
                " token rows; the dispatcher's counts must match both");
  }
  // unbind's views: one stacking backward per weight, not a zero-filled
  // gradient of the whole weight per expert (see core's run_experts_loop).
  const std::vector<at::Tensor> w1 = mlp1_weight.unbind(0), b1 = mlp1_bias.unbind(0), w2 = mlp2_weight.unbind(0),
                                b2 = mlp2_bias.unbind(0);
  auto expert = [&](size_t e, const at::Tensor& x) {
    at::Tensor h = at::linear(x, w1[e], b1[e]);
    return at::linear(clamped_swiglu(h, alpha_, limit_), w2[e], b2[e]);
  };
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (size_t e = 0; e < tokens_per_expert.size(); ++e) {
    const int64_t count = tokens_per_expert[e];
    if (count == 0) continue;
    outputs.push_back(expert(e, tokens.narrow(0, start, count)));
    start += count;
  }
  // No rows (an expert-parallel rank that received none): the empty output
  // still comes from the weights and the tokens, so both get gradients.
  if (outputs.empty()) return expert(0, tokens);
  return at::cat(outputs, 0);
}

Transformer::Transformer(const GptOssArgs& args, const c10::Device& device)
    : Decoder({"gpt_oss", args.vocab_size, args.dim, args.n_layers, args.max_seq_len, args.head_dim, args.norm_eps,
               " (YaRN-scaled from original_seq_len " + std::to_string(args.original_seq_len) + ")"},
              device,
              [args](int64_t layer_id, const at::TensorOptions& options) {
                auto moe = std::make_shared<MoE>(args.dim, args.moe_options, options,
                                                 std::make_shared<Experts>(args, options));
                return std::make_shared<DecoderBlock>(layer_id, std::make_shared<Attention>(args, layer_id, options),
                                                      "moe", moe, args.dim, args.norm_eps, options);
              },
              [args] { return rope_tables(args); }),
      args_(args) {
  add_moe_step_hook(*this);  // the trainer balances the experts before each optimizer step
}

}  // namespace titan::gpt_oss
