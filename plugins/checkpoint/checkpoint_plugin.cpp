// Plugin `checkpoint`: options (TorchTitan's names) and the descriptor.
#include <filesystem>

#include "titan/plugin.hpp"
#include "whole_state_checkpointer.h"

namespace {

std::unique_ptr<titan::Checkpointer> make_checkpointer(const titan::PluginContext& context) {
  const auto& options = context.options;
  titan::checkpoint::CheckpointOptions parsed;
  parsed.enable = options.get<bool>("enable", false, "save and resume checkpoints");
  std::string folder = options.get<std::string>("folder", "checkpoint", "relative to job.dump_folder, or absolute");
  parsed.folder = std::filesystem::path(folder).is_absolute()
                      ? folder
                      : (std::filesystem::path(context.dump_folder) / folder).string();
  parsed.interval = options.get<int64_t>("interval", 500, "save every N steps (and at the last step)");
  if (parsed.interval <= 0) options.fail("interval", "expected a positive integer");
  parsed.keep_latest_k = options.get<int64_t>("keep_latest_k", 10, "checkpoints kept; 0 keeps all");
  if (parsed.keep_latest_k < 0) options.fail("keep_latest_k", "expected >= 0");
  parsed.load_step = options.get<int64_t>("load_step", -1, "step to resume from; -1 = latest");
  options.choice("async_mode", "disabled", {"disabled"},
                 "only 'disabled' here; async saving comes with the dcp checkpointer");
  return std::make_unique<titan::checkpoint::WholeStateCheckpointer>(parsed);
}

void register_checkpoint(titan::PluginRegistrar& registrar) { registrar.checkpointer(make_checkpointer); }

}  // namespace

TITAN_PLUGIN("checkpoint", "1.0", titan::kind_checkpointer,
             "single-process whole-state checkpoints (atomic, checksummed, resumable bit-for-bit)",
             register_checkpoint)
