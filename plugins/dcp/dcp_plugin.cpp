// Plugin `dcp`: options with TorchTitan's checkpoint names, and the descriptor.
#include <filesystem>

#include "dcp_checkpointer.h"
#include "titan/plugin.hpp"

namespace {

using titan::dcp::AsyncMode;

// The options and, from the job, the dump folder and training.steps.
titan::dcp::DcpOptions read_options(const titan::PluginContext& context) {
  const auto& options = context.options;
  titan::dcp::DcpOptions parsed;
  parsed.enable = options.get<bool>("enable", false, "save and resume checkpoints");
  std::string folder = options.get<std::string>("folder", "checkpoint", "relative to job.dump_folder, or absolute");
  parsed.folder = std::filesystem::path(folder).is_absolute()
                      ? folder
                      : (std::filesystem::path(context.dump_folder) / folder).string();
  parsed.interval = options.get<int64_t>("interval", 500, "save every N steps (and at the last step)");
  if (parsed.interval <= 0) options.fail("interval", "expected a positive integer");
  parsed.async_mode = options.choice("async_mode", AsyncMode::disabled,
                                     {{"disabled", AsyncMode::disabled},
                                      {"async", AsyncMode::async},
                                      {"async_with_pinned_mem", AsyncMode::async_with_pinned_mem}},
                                     "write checkpoints on a background thread while training goes on");
  parsed.keep_latest_k = options.get<int64_t>("keep_latest_k", 10, "checkpoints kept; 0 keeps all");
  if (parsed.keep_latest_k < 0) options.fail("keep_latest_k", "expected >= 0");
  parsed.load_step = options.get<int64_t>("load_step", -1, "step to resume from; -1 = the newest intact one");
  if (parsed.load_step < -1) options.fail("load_step", "expected -1 or a step number");
  parsed.initial_load_path = options.get<std::string>(
      "initial_load_path", "", "weights to start from when there is nothing to resume: a step folder or an HF folder");
  parsed.last_save_model_only =
      options.get<bool>("last_save_model_only", false, "the last step's checkpoint holds the model only");
  parsed.export_dtype = options.choice(
      "export_dtype", at::kFloat, {{"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}},
      "dtype of the model-only last checkpoint");
  parsed.training_steps = context.training_steps;
  return parsed;
}

}  // namespace

TITAN_PLUGIN_OF(checkpointer, titan::dcp::DcpCheckpointer, "1.0",
                "sharded checkpoints: per-rank shard files, global metadata, load onto any mesh, async, atomic",
                read_options)
