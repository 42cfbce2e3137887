// A model's weights read from a Hugging Face safetensors folder, in Titan's
// parameter names: HF name lookup (ModelSpec::hf_names), shape check,
// conversion (ModelSpec::from_hf). Used by `titan checkpoint import` and
// by checkpoint.initial_load_path. One whole tensor at a time.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "titan/safetensors.hpp"

namespace titan {

class ModelSpec;

// In an HF name of ModelSpec::hf_names, this placeholder stands for an
// index: the Titan tensor is HF's tensors for index 0, 1, ... stacked along
// its first dim (a MoE layer's experts, grouped in Titan and one tensor
// each in HF): "model.layers.0.mlp.experts.{expert}.gate_proj.weight".
inline constexpr const char* kHfExpert = "{expert}";
bool hf_name_is_stacked(const std::string& hf_name);
// The stacked name with the placeholder replaced by `index`.
std::string hf_name_of_part(const std::string& hf_name, int64_t index);

class HfWeights {
 public:
  // Opens the folder (headers only) and checks its config.json, if any,
  // against the model's (layer, head and size fields must agree).
  HfWeights(const std::string& dir, const ModelSpec& spec);
  // Parameter `name`, whole, in Titan's layout; errors name the file, the
  // tensor and the expected and actual shapes.
  at::Tensor read(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  // HF tensors in the folder that no parameter in `loaded` maps to.
  std::vector<std::string> unused(const std::set<std::string>& loaded) const;
  const std::string& dir() const { return folder_.dir(); }

 private:
  at::Tensor read_one(const std::string& hf_name, const std::vector<int64_t>& expected_shape,
                      const std::string& name) const;

  safetensors::Folder folder_;
  const ModelSpec& spec_;
  std::map<std::string, std::string> names_;  // Titan -> HF
};

}  // namespace titan
