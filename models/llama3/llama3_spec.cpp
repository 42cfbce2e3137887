// Llama3Spec: sizes and FLOPs from shapes alone (405B is instant), the TP
// plan and the Hugging Face names, TorchTitan's conventions throughout.
#include "llama3_spec.h"

#include "llama3_model.h"
#include "titan/error.hpp"

namespace titan::llama3 {

std::shared_ptr<CausalLM> Llama3Spec::build(const c10::Device& device) const {
  return std::make_shared<Transformer>(args_, device);
}

int64_t Llama3Spec::num_params(bool include_embedding) const {
  const Llama3Args& a = args_;
  int64_t q_width = a.n_heads * a.head_dim(), kv_width = a.n_kv_heads * a.head_dim();
  int64_t attention = a.dim * q_width + 2 * a.dim * kv_width + q_width * a.dim;
  int64_t feed_forward = 3 * a.dim * a.ffn_hidden_dim();
  int64_t block = attention + feed_forward + 2 * a.dim;
  int64_t total = a.n_layers * block + a.dim + a.vocab_size * a.dim;  // + final norm + output
  if (a.tie_embeddings) total -= a.vocab_size * a.dim;  // the head is the embedding matrix
  return include_embedding ? total + a.vocab_size * a.dim : total;
}

double Llama3Spec::flops_per_token(int64_t seq_len) const {
  // TorchTitan: 6 per non-embedding parameter, plus 12 * l * h * q * t for
  // the attention scores and value products (causal sparsity not counted).
  double attention = 12.0 * static_cast<double>(args_.n_layers) * static_cast<double>(args_.n_heads) *
                     static_cast<double>(args_.head_dim()) * static_cast<double>(seq_len);
  // A tied head still multiplies: its FLOPs count as an untied one's.
  const double head = args_.tie_embeddings ? static_cast<double>(args_.vocab_size * args_.dim) : 0.0;
  return 6.0 * (static_cast<double>(num_params(false)) + head) + attention;
}

std::map<std::string, TpStyle> Llama3Spec::tp_plan() const {
  // TorchTitan's plan: projections into heads and the FFN width colwise,
  // out of them rowwise; the embedding over the vocabulary (rowwise), the
  // output head colwise; every norm on a sequence shard.
  return {{"tok_embeddings", TpStyle::rowwise},
          {"layers.*.attention_norm", TpStyle::sequence_parallel_norm},
          {"layers.*.attention.wq", TpStyle::colwise},
          {"layers.*.attention.wk", TpStyle::colwise},
          {"layers.*.attention.wv", TpStyle::colwise},
          {"layers.*.attention.wo", TpStyle::rowwise},
          {"layers.*.ffn_norm", TpStyle::sequence_parallel_norm},
          {"layers.*.feed_forward.w1", TpStyle::colwise},
          {"layers.*.feed_forward.w3", TpStyle::colwise},
          {"layers.*.feed_forward.w2", TpStyle::rowwise},
          {"norm", TpStyle::sequence_parallel_norm},
          {"output", TpStyle::colwise}};
}

std::vector<ShardableSize> Llama3Spec::tp_sizes() const {
  return {{"model.n_heads", "attention heads", args_.n_heads},
          {"model.n_kv_heads", "key/value heads", args_.n_kv_heads},
          {"model.dim (FFN hidden size " + std::to_string(args_.ffn_hidden_dim()) + " from dim, multiple_of and "
           "ffn_dim_multiplier)", "FFN hidden size", args_.ffn_hidden_dim()},
          {"model.tokenizer_path (its vocabulary)", "vocabulary size", args_.vocab_size}};
}

std::map<std::string, std::string> Llama3Spec::hf_names() const {
  // HF stores q_proj/k_proj rows in rotate-half order: to_hf/from_hf
  // (llama3_hf.cpp) permute them.
  static const std::pair<const char*, const char*> block_names[] = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  std::map<std::string, std::string> names = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                              {"norm.weight", "model.norm.weight"}};
  // Tied: HF's lm_head is the embedding (tie_word_embeddings), not a tensor of its own.
  if (!args_.tie_embeddings) names["output.weight"] = "lm_head.weight";
  for (int64_t layer = 0; layer < args_.n_layers; ++layer) {
    std::string index = std::to_string(layer);
    for (const auto& [titan_name, hf_name] : block_names) {
      names["layers." + index + "." + titan_name] = "model.layers." + index + "." + hf_name;
    }
  }
  return names;
}

}  // namespace titan::llama3
