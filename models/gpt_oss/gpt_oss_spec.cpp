// GptOssSpec: sizes and FLOPs from shapes alone, as TorchTitan counts them:
// the FLOPs count only the experts a token activates (top_k of
// num_experts), and attention as if every block saw the whole sequence.
#include "gpt_oss_spec.h"

#include "gpt_oss_model.h"

namespace titan::gpt_oss {

std::shared_ptr<CausalLM> GptOssSpec::build(const c10::Device& device) const {
  return std::make_shared<Transformer>(args_, device);
}

namespace {

// Parameters of one block's routed experts, and of the rest of the block.
std::pair<int64_t, int64_t> block_params(const GptOssArgs& a) {
  const int64_t q_width = a.n_heads * a.head_dim, kv_width = a.n_kv_heads * a.head_dim;
  const int64_t attention = (a.dim + 1) * q_width + 2 * (a.dim + 1) * kv_width + (q_width + 1) * a.dim + a.n_heads;
  const MoEOptions& m = a.moe_options;
  const int64_t router = (a.dim + 1) * m.num_experts;
  const int64_t experts = m.num_experts * ((a.dim + 1) * 2 * m.hidden_dim + (m.hidden_dim + 1) * a.dim);
  return {experts, attention + router + 2 * a.dim};
}

}  // namespace

int64_t GptOssSpec::num_params(bool include_embedding) const {
  auto [experts, rest] = block_params(args_);
  const int64_t total = args_.n_layers * (experts + rest) + args_.dim + args_.vocab_size * args_.dim;  // + norm + output
  return include_embedding ? total + args_.vocab_size * args_.dim : total;
}

double GptOssSpec::flops_per_token(int64_t seq_len) const {
  auto [experts, rest] = block_params(args_);
  const MoEOptions& m = args_.moe_options;
  const double inactive = static_cast<double>(args_.n_layers) * static_cast<double>(experts) *
                          static_cast<double>(m.num_experts - m.top_k) / static_cast<double>(m.num_experts);
  const double attention = 12.0 * static_cast<double>(args_.n_layers) * static_cast<double>(args_.n_heads) *
                           static_cast<double>(args_.head_dim) * static_cast<double>(seq_len);
  return 6.0 * (static_cast<double>(num_params(false)) - inactive) + attention;
}

std::map<std::string, TpStyle> GptOssSpec::tp_plan() const {
  return {{"tok_embeddings", TpStyle::rowwise},
          {"layers.*.attention_norm", TpStyle::sequence_parallel_norm},
          {"layers.*.attention", TpStyle::per_head},
          {"layers.*.attention.wq", TpStyle::colwise},
          {"layers.*.attention.wk", TpStyle::colwise},
          {"layers.*.attention.wv", TpStyle::colwise},
          {"layers.*.attention.wo", TpStyle::rowwise},
          {"layers.*.ffn_norm", TpStyle::sequence_parallel_norm},
          {"norm", TpStyle::sequence_parallel_norm},
          {"output", TpStyle::colwise}};
}

std::vector<ShardableSize> GptOssSpec::tp_sizes() const {
  return {{"model.n_heads", "attention heads", args_.n_heads},
          {"model.n_kv_heads", "key/value heads", args_.n_kv_heads},
          {"model.tokenizer_path (its vocabulary)", "vocabulary size", args_.vocab_size}};
}

}  // namespace titan::gpt_oss
