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
  safetensors::Folder folder_;
  const ModelSpec& spec_;
  std::map<std::string, std::string> names_;  // Titan -> HF
};

}  // namespace titan
