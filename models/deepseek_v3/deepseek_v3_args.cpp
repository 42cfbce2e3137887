// The DeepSeek-V3 flavor table, as TorchTitan's deepseekv3_args: the dense
// first blocks, then MoE blocks with shared experts whose gate values weigh
// the experts' outputs; multi-head latent attention everywhere.
#include "deepseek_v3_args.h"

#include <cmath>
#include <map>
#include <stdexcept>

namespace titan::deepseek_v3 {

namespace {

struct Shape {
  int64_t vocab, dim, inter_dim, moe_inter_dim, layers, dense_layers, heads;
  int64_t experts, shared, top_k, groups, limited_groups;
  RouterScore score;
  bool route_norm;
  double route_scale;
  int64_t q_lora_rank;
  double mscale;
};

DeepSeekV3Args make(const Shape& s) {
  DeepSeekV3Args args;
  args.vocab_size = s.vocab;
  args.dim = s.dim;
  args.inter_dim = s.inter_dim;
  args.n_layers = s.layers;
  args.n_dense_layers = s.dense_layers;
  args.n_heads = s.heads;
  args.q_lora_rank = s.q_lora_rank;
  args.mscale = s.mscale;
  MoEOptions& m = args.moe_options;
  m.num_experts = s.experts;
  m.num_shared_experts = s.shared;
  m.top_k = s.top_k;
  m.hidden_dim = s.moe_inter_dim;
  m.num_expert_groups = s.groups;
  m.num_limited_groups = s.limited_groups;
  m.score_func = s.score;
  m.route_norm = s.route_norm;
  m.route_scale = s.route_scale;
  m.score_before_experts = false;
  m.load_balance_coeff = 1e-3;
  return args;
}

const std::map<std::string, DeepSeekV3Args>& table() {
  constexpr auto softmax = RouterScore::softmax;
  constexpr auto sigmoid = RouterScore::sigmoid;
  static const std::map<std::string, DeepSeekV3Args> flavors = {
      // vocab, dim, FFN, expert FFN, layers, dense layers, heads,
      // experts, shared, top-k, groups, limited groups, score, route_norm, route_scale, q_lora_rank, mscale
      {"debugmodel", make({2048, 256, 1024, 256, 6, 1, 16, 8, 2, 3, 0, 0, softmax, false, 1.0, 0, 0.70})},
      {"16B", make({102400, 2048, 10944, 1408, 27, 1, 16, 64, 2, 6, 0, 0, softmax, false, 1.0, 0, 0.70})},
      {"236B", make({102400, 5120, 12288, 1536, 60, 1, 128, 160, 2, 6, 8, 3, softmax, false, 16.0, 1536, 1.0})},
      {"671B", make({129280, 7168, 18432, 2048, 61, 3, 128, 256, 1, 8, 8, 4, sigmoid, true, 2.5, 1536, 1.0})},
  };
  return flavors;
}

}  // namespace

double DeepSeekV3Args::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (yarn()) {
    double m = 0.1 * mscale * std::log(rope_factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

std::vector<std::string> flavor_names() { return {"debugmodel", "16B", "236B", "671B"}; }

DeepSeekV3Args flavor_args(const std::string& flavor) { return table().at(flavor); }

std::pair<std::string, std::string> find_problem(const DeepSeekV3Args& a) {
  auto text = [](int64_t value) { return std::to_string(value); };
  if (a.dim <= 0) return {"dim", "must be positive"};
  if (a.n_layers <= 0) return {"n_layers", "must be positive"};
  if (a.num_mtp_layers < 0) return {"num_mtp_layers", "must be >= 0 (0: no multi-token prediction)"};
  if (a.mtp_scale < 0) return {"mtp_scale", "must be >= 0"};
  if (a.n_dense_layers < 0 || a.n_dense_layers > a.n_layers)
    return {"n_dense_layers", "must be in [0, n_layers = " + text(a.n_layers) + "], got " + text(a.n_dense_layers)};
  if (a.n_heads <= 0) return {"n_heads", "must be positive"};
  if (a.q_lora_rank < 0) return {"q_lora_rank", "must be >= 0 (0: one wq projection), got " + text(a.q_lora_rank)};
  if (a.kv_lora_rank <= 0) return {"kv_lora_rank", "must be positive"};
  if (a.qk_nope_head_dim <= 0) return {"qk_nope_head_dim", "must be positive"};
  if (a.qk_rope_head_dim <= 0 || a.qk_rope_head_dim % 2 != 0)
    return {"qk_rope_head_dim", "must be positive and even (rotary pairs), got " + text(a.qk_rope_head_dim)};
  if (a.v_head_dim <= 0) return {"v_head_dim", "must be positive"};
  if (a.max_seq_len <= 0) return {"max_seq_len", "must be positive"};
  if (a.original_seq_len <= 0) return {"original_seq_len", "must be positive"};
  if (a.yarn() && a.rope_factor <= 0)
    return {"rope_factor", "must be > 0 when YaRN applies (max_seq_len > original_seq_len)"};
  if (a.n_dense_layers > 0 && a.inter_dim <= 0) return {"inter_dim", "must be positive"};
  if (a.n_dense_layers < a.n_layers) {
    auto problem = find_moe_problem(a.moe_options, a.dim);
    // core names the expert width moe_hidden_dim; this plugin's key is TorchTitan's
    if (problem.first == "moe_hidden_dim") problem.first = "moe_inter_dim";
    return problem;
  }
  return {};
}

}  // namespace titan::deepseek_v3
