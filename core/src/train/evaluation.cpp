// titan::evaluate (titan/trainer.hpp), `titan eval`'s pass: the run is built
// as for training, so the weights are the ones it would resume with, and its
// validator runs once over the held-out set.
#include <cmath>

#include "run_seams.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/trainer.hpp"
#include "training_run.hpp"
#include "validator.hpp"

namespace titan {

EvalResult evaluate(RunSpec& spec, const World& world) {
  if (!spec.core.validation.enable) {
    throw Error("evaluate: the config's validation section is off; set validation.enable=true (titan eval does)");
  }
  TrainingRun run(spec, world, RunSeams{});
  EvalResult result;
  result.step = run.resumed_step;
  result.loaded = run.resumed_step > 0 || run.loaded_initial_weights;
  if (!result.loaded) {
    spdlog::warn("no checkpoint under {} and no checkpoint.initial_load_path: evaluating the initial weights "
                 "(set checkpoint.enable=true and the run's job.dump_folder, or checkpoint.initial_load_path)",
                 spec.core.job.dump_folder);
  }
  const ValidationResult validation = run.validator->run(*run.model);
  result.loss = validation.loss;
  result.perplexity = std::exp(validation.loss);
  result.batches = validation.batches;
  result.tokens_per_sec = validation.tokens_per_sec;
  return result;
}

}  // namespace titan
