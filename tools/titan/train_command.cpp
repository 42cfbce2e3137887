// `titan train CONFIG [--set k=v ...] [--log-level L]`
#include <iostream>

#include "commands.h"
#include "titan/logging.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"

namespace titan::cli {

namespace {
const char* kTrainUsage =
    "usage: titan train CONFIG [--set key.path=value ...] [--log-level trace|debug|info|warn|error]\n"
    "  Trains as CONFIG says; --set overrides any key (e.g. --set training.steps=20).\n";
}

int train_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kTrainUsage;
    return 0;
  }
  RunArgs run = parse_run_args(args, kTrainUsage);
  auto [world, spec] = start_run(run);
  spdlog::info("config {} ({} plugins in canonical order)", run.config_path, spec.parallelizers.size());
  TrainResult result = train(spec, world);
  if (result.already_finished) return 0;  // the trainer said so
  spdlog::info("training done: steps {}..{}, last loss {:.4f}{}", result.first_step, result.last_step,
               result.last_loss, result.stopped_by_signal ? " (stopped by signal)" : "");
  return 0;
}

}  // namespace titan::cli
