// The GPT-OSS flavor table, as TorchTitan's gpt_oss registry: every block
// MoE (biases in the experts and the router), 64 query heads of 64 over 8
// key/value heads, alternating sliding-window and full attention.
#include "gpt_oss_args.h"

#include <cmath>
#include <map>

namespace titan::gpt_oss {

namespace {

GptOssArgs flavor(int64_t dim, int64_t layers, int64_t vocab, int64_t experts) {
  GptOssArgs args;
  args.dim = dim;
  args.n_layers = layers;
  args.vocab_size = vocab;
  MoEOptions& m = args.moe_options;
  m.num_experts = experts;
  m.top_k = 4;
  m.hidden_dim = 2880;
  m.num_shared_experts = 0;
  m.score_func = RouterScore::softmax;
  m.route_norm = true;
  m.route_scale = 1.0;
  m.score_before_experts = false;
  m.router_bias = true;
  m.load_balance_coeff = 1e-3;
  return args;
}

const std::map<std::string, GptOssArgs>& table() {
  // dim, layers, vocab, experts
  static const std::map<std::string, GptOssArgs> flavors = {
      {"debugmodel", flavor(256, 4, 2048, 8)},
      {"20b", flavor(2880, 24, 201088, 32)},
      {"120b", flavor(2880, 36, 201088, 128)},
  };
  return flavors;
}

}  // namespace

double GptOssArgs::mscale() const { return rope_factor > 1.0 ? 0.1 * std::log(rope_factor) + 1.0 : 1.0; }

double GptOssArgs::softmax_scale() const {
  return mscale() * mscale() / std::sqrt(static_cast<double>(head_dim));
}

std::vector<std::string> flavor_names() { return {"debugmodel", "20b", "120b"}; }

GptOssArgs flavor_args(const std::string& flavor) { return table().at(flavor); }

std::pair<std::string, std::string> find_problem(const GptOssArgs& args) {
  auto text = [](int64_t value) { return std::to_string(value); };
  if (args.dim <= 0) return {"dim", "must be positive"};
  if (args.n_layers <= 0) return {"n_layers", "must be positive"};
  if (args.n_heads <= 0) return {"n_heads", "must be positive"};
  if (args.n_kv_heads <= 0) return {"n_kv_heads", "must be positive"};
  if (args.head_dim <= 0 || args.head_dim % 2 != 0)
    return {"head_dim", "must be positive and even (rotary halves), got " + text(args.head_dim)};
  if (args.n_heads % args.n_kv_heads != 0)
    return {"n_kv_heads", "n_heads " + text(args.n_heads) + " is not divisible by n_kv_heads " + text(args.n_kv_heads)};
  if (args.sliding_window < 0) return {"sliding_window", "must be >= 0 (0: every block attends to every token)"};
  if (args.max_seq_len <= 0) return {"max_seq_len", "must be positive"};
  if (args.original_seq_len <= 0) return {"original_seq_len", "must be positive"};
  if (args.rope_factor < 1.0) return {"rope_factor", "must be >= 1 (1: no YaRN scaling)"};
  if (args.swiglu_limit <= 0) return {"swiglu_limit", "must be positive"};
  return find_moe_problem(args.moe_options, args.dim);
}

}  // namespace titan::gpt_oss
