// The deepseek_v3 plugin's `model:` options, read and checked into a
// DeepSeekV3Spec. Every override defaults to the flavor's value (0 is a
// real value here: q_lora_rank 0 is one wq, n_dense_layers 0 all MoE).
#include "deepseek_v3_args.h"
#include "deepseek_v3_spec.h"
#include "titan/config.hpp"

namespace titan::deepseek_v3 {

DeepSeekV3Spec read_deepseek_v3_spec(const ConfigNode& options) {
  std::string flavor = options.choice("flavor", "debugmodel", flavor_names(), "model size");
  DeepSeekV3Args args = flavor_args(flavor);
  MoEOptions& moe = args.moe_options;
  const std::pair<const char*, int64_t*> sizes[] = {
      {"dim", &args.dim},
      {"n_layers", &args.n_layers},
      {"n_dense_layers", &args.n_dense_layers},
      {"n_heads", &args.n_heads},
      {"inter_dim", &args.inter_dim},
      {"q_lora_rank", &args.q_lora_rank},
      {"kv_lora_rank", &args.kv_lora_rank},
      {"qk_nope_head_dim", &args.qk_nope_head_dim},
      {"qk_rope_head_dim", &args.qk_rope_head_dim},
      {"v_head_dim", &args.v_head_dim},
      {"max_seq_len", &args.max_seq_len},
      {"original_seq_len", &args.original_seq_len},
      {"num_experts", &moe.num_experts},
      {"num_shared_experts", &moe.num_shared_experts},
      {"top_k", &moe.top_k},
      {"moe_inter_dim", &moe.hidden_dim},
      {"num_expert_groups", &moe.num_expert_groups},
      {"num_limited_groups", &moe.num_limited_groups}};
  for (auto [key, field] : sizes) {
    *field = options.get<int64_t>(key, *field, std::string(key) + " (default: the flavor's)");
  }
  auto positive = NumberRange::above(0);
  args.norm_eps = options.number("norm_eps", args.norm_eps, positive, "RMSNorm eps of the blocks' norms and MLA's kv_norm / q_norm");
  args.final_norm_eps = options.number("final_norm_eps", args.final_norm_eps, positive,
                                       "RMSNorm eps of the final norm (TorchTitan's: float32 machine epsilon)");
  args.rope_theta = options.number("rope_theta", args.rope_theta, NumberRange::above(1), "rotary base");
  args.rope_factor = options.number("rope_factor", args.rope_factor, positive,
                                    "YaRN: frequency interpolation factor (when max_seq_len > original_seq_len)");
  args.beta_fast = options.number("beta_fast", args.beta_fast, positive, "YaRN: rotations where extrapolation ends");
  args.beta_slow = options.number("beta_slow", args.beta_slow, positive, "YaRN: rotations where interpolation starts");
  args.mscale = options.number("mscale", args.mscale, NumberRange::at_least(0),
                               "YaRN: softmax scale grows by (0.1 mscale ln(rope_factor) + 1)^2");
  moe.score_func = options.choice("score_func", moe.score_func,
                                  {{"softmax", RouterScore::softmax}, {"sigmoid", RouterScore::sigmoid}},
                                  "router scores (MoE blocks)");
  moe.route_norm = options.get<bool>("route_norm", moe.route_norm, "gate values of a token divided by their sum");
  moe.route_scale = options.number("route_scale", moe.route_scale, positive, "gate values multiplied by this");
  moe.load_balance_coeff = options.number(
      "load_balance_coeff", moe.load_balance_coeff, NumberRange::at_least(0),
      "auxiliary-loss-free load balancing: expert bias step per optimizer step (0 disables)");
  moe.force_load_balance = options.get<bool>(
      "moe_force_load_balance", false, "debug: route tokens round-robin, exactly balanced");
  moe.forced_experts = options.get<std::vector<int64_t>>(
      "moe_force_experts", {}, "debug: route tokens round-robin over only these expert ids, e.g. [0, 1]: the "
                               "routing extremes (experts, or expert-parallel ranks, left without tokens)");
  moe.backend = options.choice(
      "experts_backend", ExpertsBackend::automatic,
      {{"auto", ExpertsBackend::automatic}, {"loop", ExpertsBackend::loop}, {"grouped_mm", ExpertsBackend::grouped_mm}},
      "routed experts' matmuls: auto = grouped GEMM on CUDA when dim and moe_inter_dim make 16-byte rows, else a loop over experts");
  moe.token_group_alignment = options.get<int64_t>(
      "token_group_alignment", 0, "rows each expert's token group is padded to for the grouped GEMM (0: 16 on CUDA)");
  args.num_mtp_layers = options.get<int64_t>(
      "num_mtp_layers", args.num_mtp_layers,
      "multi-token prediction depths after the main model (TorchTitan's; 0: none); depth k predicts the token k "
      "after the next, from the main model's last hidden state and the embedding of the token k ahead");
  args.mtp_scale = options.number("mtp_scale", args.mtp_scale, NumberRange::at_least(0),
                                  "weight of the multi-token prediction loss (averaged over the depths) in the "
                                  "training loss (TorchTitan's loss.mtp_scale; DeepSeek-V3 used 0.3, then 0.1)");
  auto [key, problem] = find_problem(args);
  if (!key.empty()) options.fail(key, problem);
  return DeepSeekV3Spec(flavor, args);
}

}  // namespace titan::deepseek_v3
