// Qwen3Spec: sizes and FLOPs from shapes alone (235B-A22B is instant), as
// TorchTitan counts them: a MoE model's FLOPs count only the experts a
// token activates (top_k of num_experts).
#include "qwen3_spec.h"

#include "qwen3_model.h"
#include "titan/error.hpp"

namespace titan::qwen3 {

std::shared_ptr<CausalLM> Qwen3Spec::build(const c10::Device& device) const {
  return std::make_shared<Transformer>(args_, device);
}

namespace {

// Parameters of one block's routed experts, and of the rest of the block.
std::pair<int64_t, int64_t> block_params(const Qwen3Args& a) {
  int64_t q_width = a.n_heads * a.head_dim, kv_width = a.n_kv_heads * a.head_dim;
  int64_t attention = a.dim * q_width + 2 * a.dim * kv_width + q_width * a.dim + 2 * a.head_dim;
  int64_t rest = attention + 2 * a.dim;
  if (!a.moe) return {0, rest + 3 * a.dim * a.hidden_dim};
  const MoEOptions& m = a.moe_options;
  int64_t experts = 3 * m.num_experts * m.hidden_dim * a.dim;
  int64_t shared = 3 * a.dim * m.hidden_dim * m.num_shared_experts;
  return {experts, rest + a.dim * m.num_experts + shared};
}

}  // namespace

int64_t Qwen3Spec::num_params(bool include_embedding) const {
  auto [experts, rest] = block_params(args_);
  int64_t total = args_.n_layers * (experts + rest) + args_.dim + args_.vocab_size * args_.dim;  // + norm + output
  if (args_.tie_embeddings) total -= args_.vocab_size * args_.dim;  // the head is the embedding matrix
  return include_embedding ? total + args_.vocab_size * args_.dim : total;
}

double Qwen3Spec::flops_per_token(int64_t seq_len) const {
  // 6 per active non-embedding parameter plus 12 * l * h * q * t for the
  // attention scores and value products (causal sparsity not counted).
  auto [experts, rest] = block_params(args_);
  double inactive = 0;
  if (args_.moe) {
    const MoEOptions& m = args_.moe_options;
    inactive = static_cast<double>(args_.n_layers) * static_cast<double>(experts) *
               static_cast<double>(m.num_experts - m.top_k) / static_cast<double>(m.num_experts);
  }
  double attention = 12.0 * static_cast<double>(args_.n_layers) * static_cast<double>(args_.n_heads) *
                     static_cast<double>(args_.head_dim) * static_cast<double>(seq_len);
  // A tied head still multiplies: its FLOPs count as an untied one's.
  const double head = args_.tie_embeddings ? static_cast<double>(args_.vocab_size * args_.dim) : 0.0;
  return 6.0 * (static_cast<double>(num_params(false)) + head - inactive) + attention;
}

std::map<std::string, TpStyle> Qwen3Spec::tp_plan() const {
  // As llama3's, plus q_norm and k_norm on each rank's heads. In MoE
  // blocks the TP plugin splits the MoE layer itself (router whole, the
  // experts' width or their tokens split); the ffn norm gathers its input.
  std::map<std::string, TpStyle> plan = {{"tok_embeddings", TpStyle::rowwise},
                                         {"layers.*.attention_norm", TpStyle::sequence_parallel_norm},
                                         {"layers.*.attention.wq", TpStyle::colwise},
                                         {"layers.*.attention.wk", TpStyle::colwise},
                                         {"layers.*.attention.wv", TpStyle::colwise},
                                         {"layers.*.attention.q_norm", TpStyle::no_parallel},
                                         {"layers.*.attention.k_norm", TpStyle::no_parallel},
                                         {"layers.*.attention.wo", TpStyle::rowwise},
                                         {"layers.*.ffn_norm", TpStyle::sequence_parallel_norm},
                                         {"norm", TpStyle::sequence_parallel_norm},
                                         {"output", TpStyle::colwise}};
  if (!args_.moe) {
    plan["layers.*.feed_forward.w1"] = TpStyle::colwise;
    plan["layers.*.feed_forward.w3"] = TpStyle::colwise;
    plan["layers.*.feed_forward.w2"] = TpStyle::rowwise;
  }
  return plan;
}

std::vector<ShardableSize> Qwen3Spec::tp_sizes() const {
  std::vector<ShardableSize> sizes = {{"model.n_heads", "attention heads", args_.n_heads},
                                      {"model.n_kv_heads", "key/value heads", args_.n_kv_heads},
                                      {"model.tokenizer_path (its vocabulary)", "vocabulary size", args_.vocab_size}};
  if (!args_.moe) sizes.push_back({"model.hidden_dim", "FFN hidden size", args_.hidden_dim});
  // Without expert parallelism the experts' width is split too (checked
  // when the layers are split: the TP plugin cannot see ep here).
  return sizes;
}

}  // namespace titan::qwen3
