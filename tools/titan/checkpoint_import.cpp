// `titan checkpoint import`: a Hugging Face folder as a model-only
// checkpoint step folder of the run a config describes, written by that
// run's checkpointer (dcp), so `checkpoint.initial_load_path` or a resume
// can start from it.
#include <set>

#include "checkpoint_hf.h"
#include "titan/error.hpp"
#include "titan/hf_weights.hpp"
#include "titan/logging.hpp"

namespace titan::cli {

void import_safetensors(const ImportOptions& options) {
  ConfigNode config = ConfigNode::load_file(options.config_path);
  for (const auto& assignment : options.overrides) config.apply_override(assignment);
  CheckpointSpec resolved = spec_for_checkpoint(config);
  const RunSpec& spec = resolved.spec;
  HfWeights weights(options.hf_dir, *spec.model);
  auto model = spec.model->build(c10::Device(c10::kMeta));
  std::map<std::string, at::Tensor> tensors;
  std::set<std::string> loaded;
  int64_t bytes = 0;
  auto read = [&](const std::string& name, const at::Tensor& like) {
    at::Tensor value = weights.read(name, like.sizes().vec());
    tensors[name] = value.to(like.scalar_type()).contiguous();
    bytes += static_cast<int64_t>(tensors[name].nbytes());
    loaded.insert(name);
  };
  for (const auto& item : model->named_parameters()) read(item.key(), item.value());
  // Buffers the model gives HF names (DeepSeek-V3's expert bias).
  const auto names = spec.model->hf_names();
  for (const auto& item : model->named_buffers()) {
    if (names.count(item.key())) read(item.key(), item.value());
  }
  auto unused = weights.unused(loaded);
  if (!unused.empty()) {
    spdlog::warn("{} tensors of {} are not used by the model (first: {})", unused.size(), options.hf_dir,
                 unused.front());
  }
  spec.checkpointer->write_model(options.out_dir, tensors, spec.root.dump());
  spdlog::info("imported {} tensors ({:.1f} MiB) from {} into {}", tensors.size(), bytes / 1048576.0, options.hf_dir,
               options.out_dir);
}

}  // namespace titan::cli
