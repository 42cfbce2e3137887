// The llama3 plugin's descriptor and its model factory: reads and checks
// the YAML `model:` options, then hands out a Llama3Spec.
#include "llama3_args.h"
#include "llama3_spec.h"
#include "titan/plugin.hpp"

namespace {

using titan::llama3::Llama3Args;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::unique_ptr<titan::ModelSpec> make_spec(const titan::PluginContext& context) {
  const titan::ConfigNode& options = context.options;
  auto names = titan::llama3::flavor_names();
  std::string flavor = options.choice("flavor", "debugmodel", names, "model size: " + join(names));
  Llama3Args args = titan::llama3::flavor_args(flavor);
  bool mha = args.n_kv_heads == args.n_heads;
  args.rope_scaling = options.get<bool>("rope_scaling", true, "Llama 3.1 rotary frequency scaling (factor 8)");
  args.max_seq_len = options.get<int64_t>("max_seq_len", 131072, "longest sequence the rotary tables cover");
  args.depth_init = options.get<bool>("depth_init", true, "out-projection init std shrinks with layer depth");
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
  auto [key, problem] = titan::llama3::find_problem(args);
  if (!key.empty()) options.fail(key, problem);
  return std::make_unique<titan::llama3::Llama3Spec>(flavor, args);
}

void register_llama3(titan::PluginRegistrar& registrar) { registrar.model(make_spec); }

}  // namespace

#ifndef TITAN_LLAMA3_PLUGIN_NAME
#define TITAN_LLAMA3_PLUGIN_NAME "llama3"  // test variants are built under other names
#endif

TITAN_PLUGIN(TITAN_LLAMA3_PLUGIN_NAME, "1.0", titan::kind_model,
             "Llama 3 / 3.1 / 3.2 decoder (flavors debugmodel, 1B, 3B, 8B, 70B, 405B)", register_llama3)
