// The run a checkpoint belongs to, planned without training: the model
// spec (vocabulary from the tokenizer, as the trainer sets it) and the
// checkpointer that reads and writes its step folders.
#include "checkpoint_hf.h"
#include "titan/assets.hpp"
#include "titan/logging.hpp"

namespace titan {
namespace cli {

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
