// The qwen3 plugin's `model:` options, read and checked into a Qwen3Spec.
#include "qwen3_args.h"
#include "qwen3_spec.h"
#include "titan/config.hpp"

namespace titan::qwen3 {

Qwen3Spec read_qwen3_spec(const ConfigNode& options) {
  std::string flavor = options.choice("flavor", "debugmodel", flavor_names(), "model size");
  Qwen3Args args = flavor_args(flavor);
  args.max_seq_len = options.get<int64_t>("max_seq_len", args.max_seq_len, "longest sequence the rotary tables cover");
  args.depth_init = options.get<bool>("depth_init", true, "out-projection init std shrinks with layer depth");
  args.tie_embeddings = options.get<bool>("enable_weight_tying", args.tie_embeddings,
                                          "the output head is the embedding matrix (default: as the flavor's "
                                          "published checkpoint, tied for 0.6B, 1.7B and 4B)");
  // Shape overrides for experiments and tests; 0 keeps the flavor's value.
  MoEOptions& moe = args.moe_options;
  const std::pair<const char*, int64_t*> overrides[] = {
      {"dim", &args.dim},           {"n_layers", &args.n_layers},      {"n_heads", &args.n_heads},
      {"n_kv_heads", &args.n_kv_heads}, {"head_dim", &args.head_dim}, {"hidden_dim", &args.hidden_dim},
      {"num_experts", &moe.num_experts}, {"top_k", &moe.top_k},       {"moe_hidden_dim", &moe.hidden_dim}};
  for (auto [key, field] : overrides) {
    int64_t value = options.get<int64_t>(key, 0, std::string("override the flavor's ") + key + " (0: keep)");
    if (value < 0) options.fail(key, "must be >= 0 (0 keeps the flavor's value), got " + std::to_string(value));
    bool moe_key = field == &moe.num_experts || field == &moe.top_k || field == &moe.hidden_dim;
    if (value > 0 && moe_key && !args.moe) {
      options.fail(key, "flavor " + flavor + " is dense; MoE options need a MoE flavor (debugmodel_moe, 30B-A3B, "
                        "235B-A22B)");
    }
    if (value > 0) *field = value;
  }
  moe.load_balance_coeff = options.number(
      "load_balance_coeff", moe.load_balance_coeff, NumberRange::at_least(0),
      "auxiliary-loss-free load balancing: expert bias step per optimizer step (0 disables; MoE flavors)");
  moe.force_load_balance = options.get<bool>(
      "moe_force_load_balance", false, "debug: route tokens round-robin, exactly balanced (MoE flavors)");
  moe.forced_experts = options.get<std::vector<int64_t>>(
      "moe_force_experts", {}, "debug: route tokens round-robin over only these expert ids, e.g. [0, 1]: the "
                               "routing extremes (experts, or expert-parallel ranks, left without tokens) (MoE flavors)");
  if (!moe.forced_experts.empty() && !args.moe) {
    options.fail("moe_force_experts", "flavor " + flavor + " is dense; it has no experts to route to");
  }
  moe.backend = options.choice(
      "experts_backend", ExpertsBackend::automatic,
      {{"auto", ExpertsBackend::automatic}, {"loop", ExpertsBackend::loop}, {"grouped_mm", ExpertsBackend::grouped_mm}},
      "routed experts' matmuls: auto = grouped GEMM on CUDA when dim and moe_hidden_dim make 16-byte rows, else a loop over experts");
  moe.token_group_alignment = options.get<int64_t>(
      "token_group_alignment", 0, "rows each expert's token group is padded to for the grouped GEMM (0: 16 on CUDA)");
  auto [key, problem] = find_problem(args);
  if (!key.empty()) options.fail(key, problem);
  return Qwen3Spec(flavor, args);
}

}  // namespace titan::qwen3
