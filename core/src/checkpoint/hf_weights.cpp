// HfWeights: Titan parameters from a Hugging Face folder. config.json is
// checked first because a wrong head count keeps every shape the same (the
// q/k permutation would then silently scramble the weights).
#include "titan/hf_weights.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/model.hpp"

namespace titan {

namespace {

using nlohmann::json;

std::string shape_text(c10::IntArrayRef shape) { return c10::str(shape); }

void check_config(const std::string& dir, const std::string& model_config_text) {
  std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(path) || model_config_text.empty()) return;
  json theirs, ours = json::parse(model_config_text);
  try {
    std::ifstream in(path);
    theirs = json::parse(in);
  } catch (const json::exception& error) {
    throw Error("'" + path.string() + "' is not valid JSON: " + error.what());
  }
  // transformers >= 5 writes rope_theta and the scaling inside
  // rope_parameters (rope_type "default": no scaling); compare them as the
  // older top-level keys, which Titan writes and older versions read.
  if (theirs.contains("rope_parameters") && theirs["rope_parameters"].is_object()) {
    json rope = theirs["rope_parameters"];
    if (rope.contains("rope_theta")) theirs["rope_theta"] = rope["rope_theta"];
    rope.erase("rope_theta");
    theirs["rope_scaling"] = rope.value("rope_type", "default") == "default" ? json(nullptr) : rope;
  }
  // Fields that decide shapes or the rotary permutation must agree.
  // (DeepSeek-V3: the nope/rope split and rope_interleave keep shapes but
  // change which dims rotate.)
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                          "num_hidden_layers", "vocab_size", "head_dim", "num_experts", "num_experts_per_tok",
                          "moe_intermediate_size", "n_routed_experts", "n_shared_experts", "first_k_dense_replace",
                          "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                          "rope_interleave"}) {
    if (!theirs.contains(key) || !ours.contains(key) || theirs[key] == ours[key]) continue;
    throw Error("'" + path.string() + "' has " + key + " " + theirs[key].dump() + " but the configured model has " +
                ours[key].dump() + " (check model.flavor and its overrides, and the tokenizer for vocab_size)");
  }
  // Fields that change the function but not the shapes: worth a warning.
  for (const char* key : {"rope_theta", "rms_norm_eps", "rope_scaling", "tie_word_embeddings", "norm_topk_prob",
                          "routed_scaling_factor", "n_group", "topk_group"}) {
    if (!theirs.contains(key) || !ours.contains(key) || theirs[key] == ours[key]) continue;
    spdlog::warn("{} has {} {} but the configured model has {}", path.string(), key, theirs[key].dump(),
                 ours[key].dump());
  }
}

// A folder name matches a stacked name: the placeholder is digits there.
bool matches_stacked(const std::string& name, const std::string& stacked) {
  const size_t at = stacked.find(kHfExpert), width = std::string(kHfExpert).size();
  const std::string prefix = stacked.substr(0, at), suffix = stacked.substr(at + width);
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string index = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return index.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

bool hf_name_is_stacked(const std::string& hf_name) { return hf_name.find(kHfExpert) != std::string::npos; }

std::string hf_name_of_part(const std::string& hf_name, int64_t index) {
  std::string name = hf_name;
  name.replace(name.find(kHfExpert), std::string(kHfExpert).size(), std::to_string(index));
  return name;
}

HfWeights::HfWeights(const std::string& dir, const ModelSpec& spec)
    : folder_(dir), spec_(spec), names_(spec.hf_names()) {
  if (names_.empty()) throw Error("the model has no Hugging Face names, so it cannot load '" + dir + "'");
  check_config(dir, spec.hf_config_json());
}

at::Tensor HfWeights::read(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  auto hf = names_.find(name);
  if (hf == names_.end()) {
    throw Error("parameter '" + name + "' has no Hugging Face name, so it cannot be loaded from '" + dir() + "'");
  }
  if (!hf_name_is_stacked(hf->second)) {
    // HF's shape is what to_hf makes of ours (a model may transpose, as
    // GPT-OSS's experts are [E, in, out] in HF).
    at::Tensor probe = at::empty(expected_shape, at::TensorOptions().device(at::kMeta));
    const std::vector<int64_t> hf_shape = spec_.to_hf(name, probe).sizes().vec();
    return spec_.from_hf(name, read_one(hf->second, hf_shape, name));
  }
  if (expected_shape.empty()) throw Error("parameter '" + name + "' is a scalar; it cannot stack " + hf->second);
  const std::vector<int64_t> part_shape(expected_shape.begin() + 1, expected_shape.end());
  std::vector<at::Tensor> parts;
  for (int64_t index = 0; index < expected_shape[0]; ++index) {
    parts.push_back(read_one(hf_name_of_part(hf->second, index), part_shape, name));
  }
  return spec_.from_hf(name, at::stack(parts));
}

at::Tensor HfWeights::read_one(const std::string& hf_name, const std::vector<int64_t>& expected_shape,
                               const std::string& name) const {
  if (!folder_.contains(hf_name)) {
    throw Error("Hugging Face folder '" + dir() + "' has no tensor '" + hf_name + "' (the model's '" + name + "')");
  }
  const auto& info = folder_.info(hf_name);
  if (info.shape != expected_shape) {
    throw Error(folder_.file_of(hf_name) + ": tensor '" + hf_name + "' has shape " + shape_text(info.shape) +
                " but the model's '" + name + "' " + (hf_name_is_stacked(names_.at(name)) ? "holds one of " : "is ") +
                shape_text(expected_shape));
  }
  return folder_.read(hf_name);
}

std::vector<std::string> HfWeights::unused(const std::set<std::string>& loaded) const {
  std::set<std::string> used;
  std::vector<std::string> stacked;
  for (const auto& name : loaded) {
    auto hf = names_.find(name);
    if (hf == names_.end()) continue;
    if (hf_name_is_stacked(hf->second)) {
      stacked.push_back(hf->second);
    } else {
      used.insert(hf->second);
    }
  }
  std::vector<std::string> rest;
  for (const auto& name : folder_.names()) {
    if (used.count(name)) continue;
    if (std::any_of(stacked.begin(), stacked.end(), [&](const auto& s) { return matches_stacked(name, s); })) continue;
    rest.push_back(name);
  }
  return rest;
}

}  // namespace titan
