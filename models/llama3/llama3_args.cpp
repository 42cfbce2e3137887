// Flavor table and the SwiGLU hidden-size rule, as in TorchTitan's llama3.
#include "llama3_args.h"

#include <map>
#include <stdexcept>

namespace titan::llama3 {

int64_t compute_ffn_hidden_dim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier) {
  int64_t hidden = static_cast<int64_t>(2.0 * static_cast<double>(4 * dim) / 3.0);
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

int64_t Llama3Args::ffn_hidden_dim() const {
  return compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier);
}

namespace {

Llama3Args make(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                int64_t multiple_of, double multiplier) {
  Llama3Args args;
  args.dim = dim;
  args.n_layers = layers;
  args.n_heads = heads;
  args.n_kv_heads = kv_heads;
  args.vocab_size = vocab;
  args.multiple_of = multiple_of;
  args.ffn_dim_multiplier = multiplier;
  return args;
}

// Llama 3.2's small models share one matrix between embeddings and head.
Llama3Args tied(Llama3Args args) {
  args.tie_embeddings = true;
  return args;
}

const std::map<std::string, Llama3Args>& table() {
  // dim, layers, heads, kv heads, vocab, multiple_of, ffn multiplier
  static const std::map<std::string, Llama3Args> flavors = {
      {"debugmodel", make(256, 6, 16, 16, 2048, 256, 0.0)},
      {"1B", tied(make(2048, 16, 32, 8, 128256, 1024, 1.5))},
      {"3B", tied(make(3072, 28, 24, 8, 128256, 1024, 1.0))},
      {"8B", make(4096, 32, 32, 8, 128256, 1024, 1.3)},
      {"70B", make(8192, 80, 64, 8, 128256, 4096, 1.3)},
      {"405B", make(16384, 126, 128, 8, 128256, 4096, 1.2)},
  };
  return flavors;
}

}  // namespace

std::vector<std::string> flavor_names() {
  // Listed small to large, the order users read them in.
  return {"debugmodel", "1B", "3B", "8B", "70B", "405B"};
}

Llama3Args flavor_args(const std::string& flavor) { return table().at(flavor); }

std::pair<std::string, std::string> find_problem(const Llama3Args& args) {
  auto text = [](int64_t value) { return std::to_string(value); };
  if (args.dim <= 0) return {"dim", "must be positive"};
  if (args.n_layers <= 0) return {"n_layers", "must be positive"};
  if (args.n_heads <= 0) return {"n_heads", "must be positive"};
  if (args.n_kv_heads <= 0) return {"n_kv_heads", "must be positive"};
  if (args.dim % args.n_heads != 0)
    return {"n_heads", "dim " + text(args.dim) + " is not divisible by n_heads " + text(args.n_heads)};
  if (args.head_dim() % 2 != 0)
    return {"n_heads", "head dim " + text(args.head_dim()) + " must be even for rotary embeddings"};
  if (args.n_heads % args.n_kv_heads != 0)
    return {"n_kv_heads",
            "n_heads " + text(args.n_heads) + " is not divisible by n_kv_heads " + text(args.n_kv_heads)};
  if (args.max_seq_len <= 0) return {"max_seq_len", "must be positive"};
  return {};
}

}  // namespace titan::llama3
