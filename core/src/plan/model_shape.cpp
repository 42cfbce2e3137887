// A model flavor's sizes for the layout search, read through its plugin:
// the Hugging Face config it exports (transformers' field names), its
// parameter count, FLOPs per token and the sizes TP must divide.
#include <algorithm>
#include <nlohmann/json.hpp>

#include <c10/util/StringUtil.h>
#include <spdlog/spdlog.h>

#include "titan/layout_search.hpp"
#include "titan/model.hpp"
#include "titan/registry.hpp"

namespace titan {

namespace {

std::vector<std::string> model_plugins() {
  auto& registry = PluginRegistry::instance();
  std::vector<std::string> models;
  for (const auto& name : registry.available()) {
    try {
      if (registry.load(name).kinds & kind_model) models.push_back(name);
    } catch (const Error&) {
      // A plugin that does not load is not a model to offer.
    }
  }
  return models;
}

std::unique_ptr<ModelSpec> create_spec(const std::string& model, const std::string& flavor) {
  auto& registry = PluginRegistry::instance();
  const std::vector<std::string> models = model_plugins();
  if (std::find(models.begin(), models.end(), model) == models.end()) {
    throw Error("unknown model '" + model + "'; model plugins on the path: " + c10::Join(", ", models));
  }
  PluginContext context;
  // choice() refuses an unknown flavor naming the plugin's flavors.
  context.options = ConfigNode::parse("flavor: \"" + flavor + "\"\n", "--model " + model + " --flavor");
  auto spec = registry.create_model(model, context);
  context.options.check_unknown_keys();
  return spec;
}

int64_t field(const nlohmann::json& config, const char* key, int64_t fallback = 0) {
  auto found = config.find(key);
  if (found == config.end() || !found->is_number_integer()) return fallback;
  return found->get<int64_t>();
}

}  // namespace

ModelShape read_model_shape(const std::string& model, const std::string& flavor, int64_t seq_len) {
  std::unique_ptr<ModelSpec> spec = create_spec(model, flavor);
  // The export's warnings (what an HF checkpoint would compute differently)
  // are no concern of the sizes read here.
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::err);
  const std::string text = spec->hf_config_json();
  spdlog::set_level(level);
  if (text.empty()) {
    throw Error("model '" + model + "' exports no Hugging Face config (ModelSpec::hf_config_json), whose sizes "
                "the layout search reads; it cannot plan this model");
  }
  const nlohmann::json config = nlohmann::json::parse(text);
  ModelShape shape;
  shape.name = model;
  shape.flavor = spec->flavor();
  shape.hidden = field(config, "hidden_size");
  shape.layers = field(config, "num_hidden_layers");
  shape.heads = field(config, "num_attention_heads");
  shape.kv_heads = field(config, "num_key_value_heads", shape.heads);
  shape.vocab = spec->vocab_size();
  shape.max_seq_len = field(config, "max_position_embeddings");
  // Multi-head latent attention (DeepSeek) names its head widths apart.
  const int64_t head_dim = field(config, "head_dim", shape.heads > 0 ? shape.hidden / shape.heads : 0);
  const int64_t score_dim = field(config, "qk_nope_head_dim") + field(config, "qk_rope_head_dim");
  const int64_t qk_dim = score_dim > 0 ? score_dim : head_dim;
  const int64_t v_dim = field(config, "v_head_dim", head_dim);
  shape.q_dim = shape.heads * qk_dim;
  shape.kv_dim = shape.kv_heads * (qk_dim + v_dim) / 2;
  shape.ffn = field(config, "intermediate_size");
  shape.experts = field(config, "n_routed_experts", field(config, "num_experts"));
  if (shape.experts > 0) {
    shape.experts_per_token = field(config, "num_experts_per_tok");
    shape.expert_ffn = field(config, "moe_intermediate_size");
    shape.shared_experts = field(config, "n_shared_experts");
    shape.moe_layers = shape.layers - field(config, "first_k_dense_replace");
  }
  shape.params = spec->num_params(true);
  shape.flops_per_token = spec->flops_per_token(seq_len);
  for (const auto& size : spec->tp_sizes()) shape.tp_sizes.emplace_back(size.key, size.value);
  if (shape.hidden <= 0 || shape.layers <= 0 || shape.heads <= 0) {
    throw Error("model '" + model + "' flavor '" + flavor + "': its Hugging Face config lacks hidden_size, "
                "num_hidden_layers or num_attention_heads, which the layout search needs");
  }
  return shape;
}

}  // namespace titan
