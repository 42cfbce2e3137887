// Starting weights from checkpoint.initial_load_path. No collectives: every
// rank reads the whole tensors it needs and keeps its piece, so this works
// for any parallel layout of the model being trained.
#include "initial_load.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "titan/error.hpp"
#include "titan/hf_weights.hpp"
#include "titan/logging.hpp"
#include "titan/safetensors.hpp"

namespace titan {

bool load_initial_weights(const Checkpointer& checkpointer, const ModelSpec& spec, CausalLM& model) {
  const std::string path = checkpointer.initial_load_path();
  if (path.empty()) return false;
  load_weights(checkpointer, spec, model, path, "checkpoint.initial_load_path");
  return true;
}

void load_weights(const Checkpointer& checkpointer, const ModelSpec& spec, CausalLM& model, const std::string& path,
                  const std::string& what, bool with_saved_buffers) {
  if (!std::filesystem::is_directory(path)) {
    throw Error(what + " '" + path + "' is not a folder (expected a checkpoint step folder or "
                "a Hugging Face safetensors folder)");
  }
  const bool hf = safetensors::is_hf_folder(path);
  std::optional<HfWeights> hf_weights;
  std::set<std::string> saved;
  if (hf) {
    hf_weights.emplace(path, spec);
  } else {
    for (auto& name : checkpointer.model_tensor_names(path)) saved.insert(name);
  }
  at::NoGradGuard no_grad;
  std::set<std::string> loaded;
  int64_t bytes = 0;
  // The whole tensor `name` read and checked, this rank's piece of it kept.
  auto load = [&](const std::string& name, at::Tensor& tensor) {
    const TensorLayout* layout = model.layout(name);
    const std::vector<int64_t> global = layout ? layout->global_shape : tensor.sizes().vec();
    at::Tensor whole;
    if (hf) {
      whole = hf_weights->read(name, global);
    } else {
      if (!saved.count(name)) throw Error(what + " '" + path + "' has no model tensor '" + name + "'");
      whole = checkpointer.read_model_tensor(path, name);
      if (whole.sizes() != c10::IntArrayRef(global)) {
        throw Error(what + " '" + path + "': tensor '" + name + "' has shape " +
                    c10::str(whole.sizes()) + " but the model's is " + c10::str(global));
      }
    }
    tensor.copy_(layout ? local_piece(whole, *layout) : whole);
    bytes += whole.numel() * whole.element_size();
    loaded.insert(name);
  };
  for (auto& item : model.named_parameters()) load(item.key(), item.value());
  // Buffers the model gives HF names (DeepSeek-V3's expert bias, HF's
  // e_score_correction_bias) come from an HF folder too; from a Titan
  // checkpoint only parameters are starting weights, unless asked.
  const auto hf_names = hf ? spec.hf_names() : std::map<std::string, std::string>{};
  for (auto& item : model.named_buffers()) {
    const std::string& name = item.key();
    if (hf ? hf_names.count(name) : with_saved_buffers && saved.count(name)) load(name, item.value());
  }
  std::vector<std::string> unused;
  if (hf) {
    unused = hf_weights->unused(loaded);
  } else {
    for (const auto& name : saved) {
      if (!loaded.count(name)) unused.push_back(name);
    }
  }
  spdlog::info("loaded {}: {} tensors ({:.1f} MiB) from {} '{}'",
               what == "checkpoint.initial_load_path" ? "initial weights" : "weights", loaded.size(),
               bytes / 1048576.0, hf ? "Hugging Face folder" : "checkpoint", path);
  // Expected on a pipeline stage, which holds part of the model.
  if (!unused.empty()) {
    spdlog::info("{} tensors of '{}' are not used by this model or pipeline stage (first: {})", unused.size(), path,
                 unused.front());
  }
}

}  // namespace titan
