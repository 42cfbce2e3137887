// The llama3 plugin's `model:` options, read and checked into a
// Llama3Spec, for the plugin's factory (llama3_plugin.cpp) and anything
// else built on Llama3Spec.
#include "llama3_args.h"
#include "llama3_spec.h"
#include "titan/config.hpp"

namespace titan::llama3 {

Llama3Spec read_llama3_spec(const ConfigNode& options) {
  // choice() appends the allowed names to the doc.
  std::string flavor = options.choice("flavor", "debugmodel", flavor_names(), "model size");
  Llama3Args args = flavor_args(flavor);
  bool mha = args.n_kv_heads == args.n_heads;
  args.rope_scaling = options.get<bool>("rope_scaling", true, "Llama 3.1 rotary frequency scaling (factor 8)");
  args.max_seq_len = options.get<int64_t>("max_seq_len", 131072, "longest sequence the rotary tables cover");
  args.depth_init = options.get<bool>("depth_init", true, "out-projection init std shrinks with layer depth");
  args.tie_embeddings = options.get<bool>("enable_weight_tying", args.tie_embeddings,
                                          "the output head is the embedding matrix (default: as the flavor's "
                                          "published checkpoint, tied for 1B and 3B)");
  // Shape overrides for experiments and tests; 0 keeps the flavor's value.
  bool kv_heads_set = false;
  const std::pair<const char*, int64_t*> overrides[] = {
      {"dim", &args.dim}, {"n_layers", &args.n_layers}, {"n_heads", &args.n_heads}, {"n_kv_heads", &args.n_kv_heads}};
  for (auto [key, field] : overrides) {
    int64_t value = options.get<int64_t>(key, 0, std::string("override the flavor's ") + key + " (0: keep)");
    if (value < 0) options.fail(key, "must be >= 0 (0 keeps the flavor's value), got " + std::to_string(value));
    if (value > 0) *field = value;
    if (value > 0 && field == &args.n_kv_heads) kv_heads_set = true;
  }
  // A multi-head flavor stays multi-head when only n_heads changes.
  if (mha && !kv_heads_set) args.n_kv_heads = args.n_heads;
  auto [key, problem] = find_problem(args);
  if (!key.empty()) options.fail(key, problem);
  return Llama3Spec(flavor, args);
}

}  // namespace titan::llama3
