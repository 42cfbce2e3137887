// The Qwen3 flavor table, as TorchTitan's qwen3 model registry: dense
// models and the MoE ones (every block MoE, no shared expert).
#include "qwen3_args.h"

#include <map>
#include <stdexcept>

namespace titan::qwen3 {

namespace {

Qwen3Args dense(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t hidden, int64_t vocab,
                bool tied) {
  Qwen3Args args;
  args.dim = dim;
  args.n_layers = layers;
  args.n_heads = heads;
  args.n_kv_heads = kv_heads;
  args.hidden_dim = hidden;
  args.vocab_size = vocab;
  args.tie_embeddings = tied;
  return args;
}

Qwen3Args moe(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab, int64_t experts,
              int64_t top_k, int64_t moe_hidden, double theta, int64_t max_seq_len) {
  Qwen3Args args = dense(dim, layers, heads, kv_heads, 0, vocab, false);
  args.rope_theta = theta;
  args.max_seq_len = max_seq_len;
  args.moe = true;
  MoEOptions& m = args.moe_options;
  m.num_experts = experts;
  m.top_k = top_k;
  m.hidden_dim = moe_hidden;
  m.num_shared_experts = 0;
  m.score_func = RouterScore::softmax;
  m.route_norm = true;
  m.route_scale = 1.0;
  m.score_before_experts = false;
  m.load_balance_coeff = 1e-3;
  return args;
}

const std::map<std::string, Qwen3Args>& table() {
  static const std::map<std::string, Qwen3Args> flavors = {
      // dim, layers, heads, kv heads, FFN hidden, vocab, tied
      {"debugmodel", dense(256, 8, 16, 8, 3072, 2048, false)},
      {"0.6B", dense(1024, 28, 16, 8, 3072, 151936, true)},
      {"1.7B", dense(2048, 28, 16, 8, 6144, 151936, true)},
      {"4B", dense(2560, 36, 32, 8, 9728, 151936, true)},
      {"8B", dense(4096, 36, 32, 8, 12288, 151936, false)},
      {"14B", dense(5120, 40, 40, 8, 17408, 151936, false)},
      {"32B", dense(5120, 64, 64, 8, 25600, 151936, false)},
      // dim, layers, heads, kv heads, vocab, experts, top-k, expert hidden, rope theta, max seq
      {"debugmodel_moe", moe(256, 8, 16, 8, 2048, 64, 8, 768, 1e6, 4096)},
      {"30B-A3B", moe(2048, 48, 32, 4, 151936, 128, 8, 768, 1e6, 262144)},
      {"235B-A22B", moe(4096, 94, 64, 4, 151936, 128, 8, 1536, 5e6, 4096)},
  };
  return flavors;
}

}  // namespace

std::vector<std::string> flavor_names() {
  return {"debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B", "debugmodel_moe", "30B-A3B", "235B-A22B"};
}

Qwen3Args flavor_args(const std::string& flavor) { return table().at(flavor); }

std::pair<std::string, std::string> find_problem(const Qwen3Args& args) {
  auto text = [](int64_t value) { return std::to_string(value); };
  if (args.dim <= 0) return {"dim", "must be positive"};
  if (args.n_layers <= 0) return {"n_layers", "must be positive"};
  if (args.n_heads <= 0) return {"n_heads", "must be positive"};
  if (args.n_kv_heads <= 0) return {"n_kv_heads", "must be positive"};
  if (args.head_dim <= 0 || args.head_dim % 2 != 0)
    return {"head_dim", "must be positive and even (rotary pairs), got " + text(args.head_dim)};
  if (args.n_heads % args.n_kv_heads != 0)
    return {"n_kv_heads",
            "n_heads " + text(args.n_heads) + " is not divisible by n_kv_heads " + text(args.n_kv_heads)};
  if (args.max_seq_len <= 0) return {"max_seq_len", "must be positive"};
  if (args.moe) return find_moe_problem(args.moe_options, args.dim);
  if (args.hidden_dim <= 0) return {"hidden_dim", "must be positive"};
  return {};
}

}  // namespace titan::qwen3
