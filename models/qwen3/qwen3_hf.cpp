// Hugging Face interop of the qwen3 plugin: transformers' Qwen3ForCausalLM
// and Qwen3MoeForCausalLM names and config.json. Qwen3 rotates halves
// (rotate_half) as HF does, so no tensor is permuted; a MoE layer's grouped
// experts w1/w3 [E, F, D] and w2 [E, D, F] are HF's per-expert
// gate_proj/up_proj [F, D] and down_proj [D, F], named with the
// "{expert}" placeholder (titan/hf_weights.hpp). The router's expert_bias
// (auxiliary-loss-free load balancing) is a buffer HF has no place for: an
// export routes on the unbiased scores, as HF's Qwen3-MoE does.
#include <nlohmann/json.hpp>

#include "qwen3_spec.h"
#include "titan/error.hpp"
#include "titan/hf_weights.hpp"

namespace titan::qwen3 {

namespace {

// What HF's Qwen3-MoE routing cannot express: softmax scores, gates from
// the top-k (renormalized or not), scale 1, no shared experts, no groups.
void check_hf_routing(const MoEOptions& moe) {
  auto refuse = [](const std::string& what) {
    throw Error("qwen3: " + what + " has no counterpart in Hugging Face's Qwen3MoeForCausalLM, so this model "
                "cannot be exported to or imported from it");
  };
  if (moe.score_func != RouterScore::softmax) refuse("sigmoid router scores");
  if (moe.route_scale != 1.0) refuse("route_scale " + std::to_string(moe.route_scale));
  if (moe.num_shared_experts > 0) refuse("shared experts");
  if (moe.num_expert_groups > 0) refuse("group-limited routing");
  if (moe.score_before_experts) refuse("gates applied to the experts' input");
}

}  // namespace

std::map<std::string, std::string> Qwen3Spec::hf_names() const {
  if (args_.moe) check_hf_routing(args_.moe_options);
  static const std::pair<const char*, const char*> attention_names[] = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"attention.q_norm.weight", "self_attn.q_norm.weight"},
      {"attention.k_norm.weight", "self_attn.k_norm.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  static const std::pair<const char*, const char*> dense_names[] = {
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"}};
  const std::string expert = std::string("mlp.experts.") + kHfExpert + ".";
  const std::pair<std::string, std::string> moe_names[] = {
      {"moe.router.gate.weight", "mlp.gate.weight"},
      {"moe.experts.w1", expert + "gate_proj.weight"},
      {"moe.experts.w2", expert + "down_proj.weight"},
      {"moe.experts.w3", expert + "up_proj.weight"}};
  std::map<std::string, std::string> names = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                              {"norm.weight", "model.norm.weight"}};
  // Tied: HF's lm_head is the embedding (tie_word_embeddings), not a tensor of its own.
  if (!args_.tie_embeddings) names["output.weight"] = "lm_head.weight";
  for (int64_t layer = 0; layer < args_.n_layers; ++layer) {
    const std::string titan = "layers." + std::to_string(layer) + ".";
    const std::string hf = "model.layers." + std::to_string(layer) + ".";
    for (const auto& [ours, theirs] : attention_names) names[titan + ours] = hf + theirs;
    if (args_.moe) {
      for (const auto& [ours, theirs] : moe_names) names[titan + ours] = hf + theirs;
    } else {
      for (const auto& [ours, theirs] : dense_names) names[titan + ours] = hf + theirs;
    }
  }
  return names;
}

std::string Qwen3Spec::hf_config_json() const {
  // Field names and meanings of transformers' Qwen3Config / Qwen3MoeConfig.
  nlohmann::ordered_json config = {
      {"architectures", {args_.moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
      {"model_type", args_.moe ? "qwen3_moe" : "qwen3"},
      {"hidden_size", args_.dim},
      {"intermediate_size", args_.moe ? args_.moe_options.hidden_dim : args_.hidden_dim},
      {"num_attention_heads", args_.n_heads},
      {"num_key_value_heads", args_.n_kv_heads},
      {"num_hidden_layers", args_.n_layers},
      {"head_dim", args_.head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", args_.norm_eps},
      {"rope_theta", args_.rope_theta},
      {"rope_scaling", nullptr},
      {"vocab_size", args_.vocab_size},
      {"max_position_embeddings", args_.max_seq_len},
      {"tie_word_embeddings", args_.tie_embeddings},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"use_sliding_window", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"}};
  if (args_.moe) {
    const MoEOptions& moe = args_.moe_options;
    config["moe_intermediate_size"] = moe.hidden_dim;
    config["num_experts"] = moe.num_experts;
    config["num_experts_per_tok"] = moe.top_k;
    config["norm_topk_prob"] = moe.route_norm;
    config["decoder_sparse_step"] = 1;  // every block is MoE
    config["mlp_only_layers"] = nlohmann::ordered_json::array();
    config["router_aux_loss_coef"] = 0.0;  // Titan balances with the expert bias, not an auxiliary loss
    config["output_router_logits"] = false;
  }
  return config.dump(2) + "\n";
}

}  // namespace titan::qwen3
