// The run a checkpoint belongs to, resolved without training: the model
// spec (vocabulary from the tokenizer, as the trainer sets it) and the
// checkpointer that reads and writes its step folders.
#include "checkpoint_hf.h"
#include "titan/assets.hpp"
#include "titan/logging.hpp"

namespace titan {
namespace cli {

CheckpointSpec spec_for_checkpoint(const ConfigNode& config) {
  CheckpointSpec result;
  result.spec = resolve_run(config);
  result.tokenizer = load_tokenizer(resolve_asset(result.spec.core.tokenizer_path));
  result.spec.model->set_vocab_size(result.tokenizer->vocab_size());
  result.spec.checkpointer->attach(CheckpointEnv{0, 1, nullptr, nullptr, result.spec.root.dump()});
  spdlog::info("model {} flavor {}, vocab {}", result.spec.model_plugin, result.spec.model->flavor(),
               result.spec.model->vocab_size());
  return result;
}

}  // namespace cli
}  // namespace titan
