// Hugging Face interop of the deepseek_v3 plugin: transformers'
// DeepseekV3ForCausalLM names and config.json. MLA's projections are HF's
// q_proj (or q_a_proj, q_a_layernorm, q_b_proj), kv_a_proj_with_mqa,
// kv_a_layernorm, kv_b_proj and o_proj. Titan rotates interleaved pairs of
// the rope dims, as DeepSeek's weights do; config.json says
// rope_interleave: true, so transformers rotates the same pairs and no
// tensor is permuted. A MoE block's grouped experts w1/w3 [E, F, D] and w2
// [E, D, F] are HF's per-expert gate_proj/up_proj and down_proj through the
// "{expert}" placeholder (titan/hf_weights.hpp); the router's expert bias is
// HF's e_score_correction_bias (the same auxiliary-loss-free balancing
// bias: it steers the choice, not the gate values).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "deepseek_v3_spec.h"
#include "titan/error.hpp"
#include "titan/hf_weights.hpp"
#include "titan/logging.hpp"

namespace titan::deepseek_v3 {

namespace {

// HF's latent norms (kv_a_layernorm, q_a_layernorm) take their default eps.
constexpr double kHfLatentNormEps = 1e-6;

// What HF's DeepSeek-V3 routing cannot express: it scores with a sigmoid,
// weighs the experts' outputs, always has a shared expert and ranks groups
// by their top two scores.
void check_hf_routing(const DeepSeekV3Args& args) {
  if (args.n_dense_layers == args.n_layers) return;  // no MoE block
  const MoEOptions& moe = args.moe_options;
  auto refuse = [](const std::string& what) {
    throw Error("deepseek_v3: " + what + " has no counterpart in Hugging Face's DeepseekV3ForCausalLM, so this model "
                "cannot be exported to or imported from it");
  };
  if (moe.score_func != RouterScore::sigmoid) refuse("softmax router scores (score_func: softmax; HF's is sigmoid)");
  if (moe.score_before_experts) refuse("gates applied to the experts' input");
  if (moe.num_shared_experts == 0) refuse("a MoE block without shared experts (num_shared_experts: 0)");
  if (moe.num_expert_groups == 0 && moe.num_experts < 2) refuse("a single routed expert");
  if (args.yarn() && args.mscale == 0) refuse("YaRN with mscale 0");
}

}  // namespace

std::map<std::string, std::string> DeepSeekV3Spec::hf_names() const {
  check_hf_routing(args_);
  std::vector<std::pair<std::string, std::string>> attention_names = {
      {"attention.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attention.kv_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attention.wkv_b.weight", "self_attn.kv_b_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  if (args_.q_lora_rank == 0) {
    attention_names.push_back({"attention.wq.weight", "self_attn.q_proj.weight"});
  } else {
    attention_names.push_back({"attention.wq_a.weight", "self_attn.q_a_proj.weight"});
    attention_names.push_back({"attention.q_norm.weight", "self_attn.q_a_layernorm.weight"});
    attention_names.push_back({"attention.wq_b.weight", "self_attn.q_b_proj.weight"});
  }
  static const std::pair<const char*, const char*> dense_names[] = {
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"}};
  const std::string expert = std::string("mlp.experts.") + kHfExpert + ".";
  std::vector<std::pair<std::string, std::string>> moe_names = {
      {"moe.router.gate.weight", "mlp.gate.weight"},
      {"moe.experts.w1", expert + "gate_proj.weight"},
      {"moe.experts.w2", expert + "down_proj.weight"},
      {"moe.experts.w3", expert + "up_proj.weight"},
      {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
      {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"}};
  // A buffer, exported and imported with the parameters (a model without
  // load balancing has none; HF then routes on a zero bias).
  if (args_.moe_options.load_balance_coeff > 0) {
    moe_names.push_back({"moe.router.expert_bias", "mlp.gate.e_score_correction_bias"});
  }
  std::map<std::string, std::string> names = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                              {"norm.weight", "model.norm.weight"},
                                              {"output.weight", "lm_head.weight"}};
  // The multi-token prediction blocks follow the main ones in HF's layers
  // (DeepSeek's checkpoint layout): depth k is model.layers.{n_layers + k},
  // its FFN the last main block's kind; HF's copies of the embedding and
  // head there (embed_tokens, shared_head.head) are the main model's.
  for (int64_t layer = 0; layer < args_.n_layers + args_.num_mtp_layers; ++layer) {
    const bool mtp = layer >= args_.n_layers;
    const std::string titan = mtp ? "mtp_layers." + std::to_string(layer - args_.n_layers) + "."
                                  : "layers." + std::to_string(layer) + ".";
    const std::string hf = "model.layers." + std::to_string(layer) + ".";
    for (const auto& [ours, theirs] : attention_names) names[titan + ours] = hf + theirs;
    if (std::min(layer, args_.n_layers - 1) >= args_.n_dense_layers) {
      for (const auto& [ours, theirs] : moe_names) names[titan + ours] = hf + theirs;
    } else {
      for (const auto& [ours, theirs] : dense_names) names[titan + ours] = hf + theirs;
    }
    if (mtp) {
      for (const char* part : {"enorm.weight", "hnorm.weight", "eh_proj.weight"}) names[titan + part] = hf + part;
      names[titan + "mtp_norm.weight"] = hf + "shared_head.norm.weight";
    }
  }
  return names;
}

std::string DeepSeekV3Spec::hf_config_json() const {
  check_hf_routing(args_);
  const DeepSeekV3Args& a = args_;
  const MoEOptions& moe = a.moe_options;
  if (a.norm_eps != a.final_norm_eps || a.norm_eps != kHfLatentNormEps) {
    spdlog::warn("deepseek_v3: Hugging Face's DeepseekV3 has one rms_norm_eps for the block and final norms and "
                 "1e-6 for kv_a_layernorm / q_a_layernorm; this model's norm_eps {} and final_norm_eps {} differ, "
                 "so its logits there differ slightly (set both to 1e-6 for the same function)",
                 a.norm_eps, a.final_norm_eps);
  }
  const bool moe_blocks = a.n_dense_layers < a.n_layers;
  nlohmann::ordered_json rope_scaling = nullptr;
  if (a.yarn()) {
    // mscale_all_dim = mscale: HF's attention factor on cos/sin is
    // mscale(factor, mscale) / mscale(factor, mscale_all_dim) = 1, and its
    // softmax scale gains mscale(factor, mscale_all_dim)^2, as TorchTitan's.
    rope_scaling = {{"type", "yarn"},
                    {"rope_type", "yarn"},
                    {"factor", a.rope_factor},
                    {"original_max_position_embeddings", a.original_seq_len},
                    {"beta_fast", a.beta_fast},
                    {"beta_slow", a.beta_slow},
                    {"mscale", a.mscale},
                    {"mscale_all_dim", a.mscale}};
  }
  // Field names and meanings of transformers' DeepseekV3Config (and the
  // remote-code fields DeepSeek's own config.json has: scoring_func,
  // topk_method). Titan trains the output head untied.
  nlohmann::ordered_json config = {
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"model_type", "deepseek_v3"},
      {"vocab_size", a.vocab_size},
      {"hidden_size", a.dim},
      {"intermediate_size", a.inter_dim},
      {"moe_intermediate_size", moe.hidden_dim},
      {"num_hidden_layers", a.n_layers},
      {"first_k_dense_replace", a.n_dense_layers},
      {"num_attention_heads", a.n_heads},
      {"num_key_value_heads", a.n_heads},
      {"q_lora_rank", a.q_lora_rank == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.q_lora_rank)},
      {"kv_lora_rank", a.kv_lora_rank},
      {"qk_nope_head_dim", a.qk_nope_head_dim},
      {"qk_rope_head_dim", a.qk_rope_head_dim},
      {"v_head_dim", a.v_head_dim},
      {"head_dim", a.qk_rope_head_dim},  // what transformers sets: the rotary's width
      {"rope_interleave", true},
      {"rope_theta", a.rope_theta},
      {"rope_scaling", rope_scaling},
      {"max_position_embeddings", a.max_seq_len},
      {"hidden_act", "silu"},
      {"rms_norm_eps", a.norm_eps},
      {"tie_word_embeddings", false},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"num_nextn_predict_layers", a.num_mtp_layers},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"}};
  if (moe_blocks) {
    config["n_routed_experts"] = moe.num_experts;
    config["n_shared_experts"] = moe.num_shared_experts;
    config["num_experts_per_tok"] = moe.top_k;
    // Titan's ungrouped routing is HF's one group of every expert.
    config["n_group"] = moe.num_expert_groups > 0 ? moe.num_expert_groups : 1;
    config["topk_group"] = moe.num_expert_groups > 0 ? moe.num_limited_groups : 1;
    config["norm_topk_prob"] = moe.route_norm;
    config["routed_scaling_factor"] = moe.route_scale;
    config["scoring_func"] = "sigmoid";
    config["topk_method"] = "noaux_tc";
  }
  return config.dump(2) + "\n";
}

}  // namespace titan::deepseek_v3
