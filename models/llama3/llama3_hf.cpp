// Hugging Face interop of the llama3 plugin: the q/k row permutation and
// HF's config.json. Titan rotates interleaved pairs (x[2i], x[2i+1]) as
// Meta's reference does (apply_rope); HF's LlamaAttention rotates halves
// (x[i], x[i + head_dim/2]) via rotate_half. So HF's q_proj/k_proj rows
// are, within each head, Meta's rows reordered from (pair i, member j) to
// (member j, pair i) - what convert_llama_weights_to_hf.py's permute does.
#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "llama3_spec.h"
#include "titan/error.hpp"

namespace titan::llama3 {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Heads whose rows a rotary projection holds (0 for other parameters).
// wk has n_kv_heads heads under grouped-query attention.
int64_t rotary_heads(const std::string& name, const Llama3Args& args) {
  if (ends_with(name, "attention.wq.weight")) return args.n_heads;
  if (ends_with(name, "attention.wk.weight")) return args.n_kv_heads;
  return 0;
}

// Rows of each head viewed as [first, second, cols] and the two row axes
// swapped: [half, 2] -> [2, half] is Meta -> HF, [2, half] -> [half, 2] back.
at::Tensor swap_row_axes(const std::string& name, const at::Tensor& weight, int64_t heads, int64_t first,
                         int64_t second) {
  int64_t head_dim = first * second;
  if (weight.dim() != 2 || weight.size(0) != heads * head_dim) {
    throw Error("llama3: '" + name + "' has shape " + c10::str(weight.sizes()) + ", expected [" +
                std::to_string(heads * head_dim) + ", *] (" + std::to_string(heads) + " heads of " +
                std::to_string(head_dim) + " rows) for the rotary permutation");
  }
  return weight.reshape({heads, first, second, weight.size(1)}).transpose(1, 2).reshape(weight.sizes()).contiguous();
}

}  // namespace

at::Tensor Llama3Spec::to_hf(const std::string& name, const at::Tensor& tensor) const {
  int64_t heads = rotary_heads(name, args_);
  if (heads == 0) return tensor;
  return swap_row_axes(name, tensor, heads, args_.head_dim() / 2, 2);
}

at::Tensor Llama3Spec::from_hf(const std::string& name, const at::Tensor& tensor) const {
  int64_t heads = rotary_heads(name, args_);
  if (heads == 0) return tensor;
  return swap_row_axes(name, tensor, heads, 2, args_.head_dim() / 2);
}

std::string Llama3Spec::hf_config_json() const {
  // Field names and meanings of transformers' LlamaConfig. torch_dtype is
  // the training dtype; an exporter that casts rewrites it.
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", args_.dim},
      {"intermediate_size", args_.ffn_hidden_dim()},
      {"num_attention_heads", args_.n_heads},
      {"num_key_value_heads", args_.n_kv_heads},
      {"num_hidden_layers", args_.n_layers},
      {"head_dim", args_.head_dim()},
      {"hidden_act", "silu"},
      {"rms_norm_eps", args_.norm_eps},
      {"rope_theta", args_.rope_theta},
      {"rope_scaling", nullptr},
      {"vocab_size", args_.vocab_size},
      {"max_position_embeddings", args_.max_seq_len},
      {"tie_word_embeddings", args_.tie_embeddings},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"pretraining_tp", 1},
      {"use_cache", true},
      {"torch_dtype", "float32"}};
  if (args_.rope_scaling) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", args_.scaling.factor},
                              {"low_freq_factor", args_.scaling.low_freq_factor},
                              {"high_freq_factor", args_.scaling.high_freq_factor},
                              {"original_max_position_embeddings",
                               static_cast<int64_t>(args_.scaling.original_max_position)}};
  }
  return config.dump(2) + "\n";
}

}  // namespace titan::llama3
