// The run a checkpoint belongs to, planned without training: the model
// spec (vocabulary from the tokenizer, as the trainer sets it) and the
// checkpointer that reads and writes its step folders.
#include <filesystem>

#include "checkpoint_hf.h"
#include "titan/logging.hpp"

namespace titan {
namespace build_info {
const char* source_dir();
}

namespace cli {

namespace {

// The trainer's rule for asset paths: the working directory first, then
// the Titan source tree (so a config naming a shipped tokenizer works from
// anywhere).
std::string resolve_asset(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path) || path == "bytes") return path;
  fs::path shipped = fs::path(build_info::source_dir()) / path;
  return fs::exists(shipped) ? shipped.string() : path;
}

}  // namespace

CheckpointPlan plan_for_checkpoint(const ConfigNode& config) {
  CheckpointPlan result;
  result.plan = plan_run(config);
  result.tokenizer = load_tokenizer(resolve_asset(result.plan.core.tokenizer_path));
  result.plan.model->set_vocab_size(result.tokenizer->vocab_size());
  result.plan.checkpointer->attach(CheckpointEnv{0, 1, nullptr, nullptr, result.plan.root.dump()});
  spdlog::info("model {} flavor {}, vocab {}", result.plan.model_plugin, result.plan.model->flavor(),
               result.plan.model->vocab_size());
  return result;
}

}  // namespace cli
}  // namespace titan
