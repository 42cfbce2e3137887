// `titan eval CONFIG [--set k=v ...] [--log-level L]`: the loss and
// perplexity of the model a run would resume with, on its validation set.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"

namespace titan::cli {

namespace {
const char* kEvalUsage =
    "usage: titan eval CONFIG [--set key.path=value ...] [--log-level trace|debug|info|warn|error]\n"
    "  The mean next-token loss and the perplexity of the model the run in CONFIG would resume with (its newest\n"
    "  checkpoint under job.dump_folder when checkpoint.enable, else checkpoint.initial_load_path: a checkpoint\n"
    "  step folder or a Hugging Face folder) over the validation set once (validation.dataset or\n"
    "  validation.dataset_path; validation.steps limits the batches), through the config's parallelisms (run it\n"
    "  under titan launch as the training was). Rank 0 prints the result and writes it to\n"
    "  job.dump_folder/eval.json.\n";

void write_eval_json(const std::string& dump_folder, const EvalResult& result) {
  nlohmann::json json = {{"step", result.step},         {"loaded", result.loaded},
                         {"loss", result.loss},         {"perplexity", result.perplexity},
                         {"batches", result.batches},   {"tokens_per_sec", result.tokens_per_sec}};
  std::filesystem::create_directories(dump_folder);
  const std::string path = dump_folder + "/eval.json";
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) throw Error("cannot write '" + path + "' (check job.dump_folder)");
}
}  // namespace

int eval_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kEvalUsage;
    return 0;
  }
  auto [world, spec] = start_run(parse_run_args(args, kEvalUsage), {"validation.enable=true"});
  const EvalResult result = evaluate(spec, world);
  if (world.rank != 0) return 0;
  write_eval_json(spec.core.job.dump_folder, result);
  std::cout << "eval: loss " << result.loss << ", perplexity " << result.perplexity << " over " << result.batches
            << " batches, "
            << (result.step > 0 ? "the checkpoint of step " + std::to_string(result.step)
                : result.loaded ? std::string("the weights of checkpoint.initial_load_path")
                                : std::string("the initial weights"))
            << " (" << spec.core.job.dump_folder << "/eval.json)\n";
  return 0;
}

}  // namespace titan::cli
