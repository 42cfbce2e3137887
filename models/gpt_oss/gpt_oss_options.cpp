// The gpt_oss plugin's `model:` options, read and checked into a GptOssSpec.
#include "gpt_oss_args.h"
#include "gpt_oss_spec.h"
#include "titan/config.hpp"

namespace titan::gpt_oss {

GptOssSpec read_gpt_oss_spec(const ConfigNode& options) {
  std::string flavor = options.choice("flavor", "debugmodel", flavor_names(), "model size");
  GptOssArgs args = flavor_args(flavor);
  args.max_seq_len = options.get<int64_t>("max_seq_len", args.max_seq_len, "longest sequence the rotary tables cover");
  args.sliding_window = options.get<int64_t>(
      "sliding_window", args.sliding_window,
      "tokens the even blocks attend to (the query's own included); 0: every block attends to every token");
  args.depth_init = options.get<bool>("depth_init", true, "init std shrinks with layer depth");
  // Shape overrides for experiments and tests; 0 keeps the flavor's value.
  MoEOptions& moe = args.moe_options;
  const std::pair<const char*, int64_t*> overrides[] = {
      {"dim", &args.dim},           {"n_layers", &args.n_layers},      {"n_heads", &args.n_heads},
      {"n_kv_heads", &args.n_kv_heads}, {"head_dim", &args.head_dim}, {"num_experts", &moe.num_experts},
      {"top_k", &moe.top_k},        {"moe_hidden_dim", &moe.hidden_dim}};
  for (auto [key, field] : overrides) {
    int64_t value = options.get<int64_t>(key, 0, std::string("override the flavor's ") + key + " (0: keep)");
    if (value < 0) options.fail(key, "must be >= 0 (0 keeps the flavor's value), got " + std::to_string(value));
    if (value > 0) *field = value;
  }
  moe.load_balance_coeff = options.number(
      "load_balance_coeff", moe.load_balance_coeff, NumberRange::at_least(0),
      "auxiliary-loss-free load balancing: expert bias step per optimizer step (0 disables)");
  moe.force_load_balance = options.get<bool>("moe_force_load_balance", false,
                                             "debug: route tokens round-robin, exactly balanced");
  auto [key, problem] = find_problem(args);
  if (!key.empty()) options.fail(key, problem);
  return GptOssSpec(flavor, args);
}

}  // namespace titan::gpt_oss
