// Plugin `dcp`: options with TorchTitan's checkpoint names, and the descriptor.
#include <filesystem>

#include "dcp_checkpointer.h"
#include "titan/plugin.hpp"

namespace {

std::unique_ptr<titan::Checkpointer> make_checkpointer(const titan::PluginContext& context) {
  const auto& options = context.options;
  titan::dcp::DcpOptions parsed;
  parsed.enable = options.get<bool>("enable", false, "save and resume checkpoints");
  std::string folder = options.get<std::string>("folder", "checkpoint", "relative to job.dump_folder, or absolute");
  parsed.folder = std::filesystem::path(folder).is_absolute()
                      ? folder
                      : (std::filesystem::path(context.dump_folder) / folder).string();
  parsed.interval = options.get<int64_t>("interval", 500, "save every N steps (and at the last step)");
  if (parsed.interval <= 0) options.fail("interval", "expected a positive integer");
  std::string async_mode = options.choice("async_mode", "disabled", {"disabled", "async", "async_with_pinned_mem"},
                                          "write checkpoints on a background thread while training goes on");
  parsed.async_mode = async_mode == "async"                   ? titan::dcp::AsyncMode::async
                      : async_mode == "async_with_pinned_mem" ? titan::dcp::AsyncMode::async_with_pinned_mem
                                                              : titan::dcp::AsyncMode::disabled;
  parsed.keep_latest_k = options.get<int64_t>("keep_latest_k", 10, "checkpoints kept; 0 keeps all");
  if (parsed.keep_latest_k < 0) options.fail("keep_latest_k", "expected >= 0");
  parsed.load_step = options.get<int64_t>("load_step", -1, "step to resume from; -1 = the newest intact one");
  if (parsed.load_step < -1) options.fail("load_step", "expected -1 or a step number");
  parsed.initial_load_path = options.get<std::string>(
      "initial_load_path", "", "weights to start from when there is nothing to resume: a step folder or an HF folder");
  parsed.last_save_model_only =
      options.get<bool>("last_save_model_only", false, "the last step's checkpoint holds the model only");
  std::string export_dtype = options.choice("export_dtype", "float32", {"float32", "bfloat16", "float16"},
                                            "dtype of the model-only last checkpoint");
  parsed.export_dtype = export_dtype == "bfloat16" ? at::kBFloat16 : export_dtype == "float16" ? at::kHalf : at::kFloat;
  parsed.training_steps = context.training_steps;
  return std::make_unique<titan::dcp::DcpCheckpointer>(parsed);
}

void register_dcp(titan::PluginRegistrar& registrar) { registrar.checkpointer(make_checkpointer); }

}  // namespace

TITAN_PLUGIN("dcp", "1.0", titan::kind_checkpointer,
             "sharded checkpoints: per-rank shard files, global metadata, load onto any mesh, async, atomic",
             register_dcp)
