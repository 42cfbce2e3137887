// Hugging Face interop of the gpt_oss plugin: transformers'
// GptOssForCausalLM names and config.json. Both rotate halves and
// interleave the experts' gate and up columns alike; HF's experts multiply
// x @ W ([E, in, out]) where Titan's are [E, out, in] as torch.nn.Linear,
// so the two expert weights are transposed. The router's expert_bias
// (auxiliary-loss-free load balancing) is a buffer HF has no place for: an
// export routes on the unbiased scores.
#include <nlohmann/json.hpp>

#include "gpt_oss_spec.h"
#include "titan/hf_weights.hpp"
#include "titan/param_init.hpp"

namespace titan::gpt_oss {

namespace {

bool transposed_in_hf(const std::string& name) {
  return name_ends_with_any(name, {"moe.experts.mlp1_weight", "moe.experts.mlp2_weight"});
}

}  // namespace

std::map<std::string, std::string> GptOssSpec::hf_names() const {
  static const std::pair<const char*, const char*> block_names[] = {
      {"attention.wq.weight", "self_attn.q_proj.weight"}, {"attention.wq.bias", "self_attn.q_proj.bias"},
      {"attention.wk.weight", "self_attn.k_proj.weight"}, {"attention.wk.bias", "self_attn.k_proj.bias"},
      {"attention.wv.weight", "self_attn.v_proj.weight"}, {"attention.wv.bias", "self_attn.v_proj.bias"},
      {"attention.wo.weight", "self_attn.o_proj.weight"}, {"attention.wo.bias", "self_attn.o_proj.bias"},
      {"attention.sinks", "self_attn.sinks"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"moe.router.gate.weight", "mlp.router.weight"},    {"moe.router.gate.bias", "mlp.router.bias"},
      {"moe.experts.mlp1_weight", "mlp.experts.gate_up_proj"},
      {"moe.experts.mlp1_bias", "mlp.experts.gate_up_proj_bias"},
      {"moe.experts.mlp2_weight", "mlp.experts.down_proj"},
      {"moe.experts.mlp2_bias", "mlp.experts.down_proj_bias"}};
  std::map<std::string, std::string> names = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                              {"norm.weight", "model.norm.weight"},
                                              {"output.weight", "lm_head.weight"}};
  for (int64_t layer = 0; layer < args_.n_layers; ++layer) {
    const std::string titan = "layers." + std::to_string(layer) + ".";
    const std::string hf = "model.layers." + std::to_string(layer) + ".";
    for (const auto& [ours, theirs] : block_names) names[titan + ours] = hf + theirs;
  }
  return names;
}

at::Tensor GptOssSpec::to_hf(const std::string& name, const at::Tensor& tensor) const {
  return transposed_in_hf(name) ? tensor.transpose(1, 2).contiguous() : tensor;
}

at::Tensor GptOssSpec::from_hf(const std::string& name, const at::Tensor& tensor) const {
  return transposed_in_hf(name) ? tensor.transpose(1, 2).contiguous() : tensor;
}

std::string GptOssSpec::hf_config_json() const {
  // Field names and meanings of transformers' GptOssConfig.
  nlohmann::ordered_json layer_types = nlohmann::ordered_json::array();
  for (int64_t layer = 0; layer < args_.n_layers; ++layer) {
    layer_types.push_back(args_.sliding(layer) ? "sliding_attention" : "full_attention");
  }
  const MoEOptions& moe = args_.moe_options;
  nlohmann::ordered_json config = {
      {"architectures", {"GptOssForCausalLM"}},
      {"model_type", "gpt_oss"},
      {"hidden_size", args_.dim},
      {"intermediate_size", moe.hidden_dim},
      {"num_attention_heads", args_.n_heads},
      {"num_key_value_heads", args_.n_kv_heads},
      {"num_hidden_layers", args_.n_layers},
      {"head_dim", args_.head_dim},
      {"num_local_experts", moe.num_experts},
      {"num_experts_per_tok", moe.top_k},
      {"experts_per_token", moe.top_k},
      {"vocab_size", args_.vocab_size},
      {"sliding_window", args_.sliding_window > 0 ? args_.sliding_window : args_.max_seq_len},
      {"layer_types", layer_types},
      {"rms_norm_eps", args_.norm_eps},
      {"rope_theta", args_.rope_theta},
      {"rope_parameters",
       {{"rope_type", "yarn"},
        {"rope_theta", args_.rope_theta},
        {"factor", args_.rope_factor},
        {"beta_fast", args_.beta_fast},
        {"beta_slow", args_.beta_slow},
        {"truncate", false},
        {"original_max_position_embeddings", args_.original_seq_len}}},
      {"max_position_embeddings", args_.max_seq_len},
      {"initial_context_length", args_.original_seq_len},
      {"swiglu_limit", args_.swiglu_limit},
      {"swiglu_alpha", args_.swiglu_alpha},
      {"attention_bias", true},
      {"attention_dropout", 0.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", false},
      {"router_aux_loss_coef", 0.0},  // Titan balances with the expert bias, not an auxiliary loss
      {"output_router_logits", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"}};
  if (args_.rope_factor <= 1.0) config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", args_.rope_theta}};
  return config.dump(2) + "\n";
}

}  // namespace titan::gpt_oss
