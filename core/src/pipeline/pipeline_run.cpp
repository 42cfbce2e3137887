// A pipelined run's shape from the config: stages from the pipeline plugin,
// microbatches from training.local_batch_size (validation's batch must split
// into as many), lists from the schedule (or the user's CSV), checked before
// any weight exists.
#include <optional>

#include "titan/error.hpp"
#include "titan/run_spec.hpp"

namespace titan {

namespace {

int64_t pipeline_microbatches(const PipelineSettings& settings, int64_t local_batch_size) {
  if (settings.microbatches == 0) {
    if (local_batch_size % settings.microbatch_size != 0) {
      throw Error("training.local_batch_size (" + std::to_string(local_batch_size) + ") is not a multiple of " +
                  kMicrobatchSizeKey + " (" + std::to_string(settings.microbatch_size) + "); change either");
    }
    return local_batch_size / settings.microbatch_size;
  }
  if (local_batch_size % settings.microbatches != 0) {
    throw Error("training.local_batch_size (" + std::to_string(local_batch_size) + ") does not split into " +
                kMicrobatchesKey + " = " + std::to_string(settings.microbatches) + " equal microbatches; change either");
  }
  return settings.microbatches;
}

}  // namespace

PipelineRun resolve_pipeline_run(const RunSpec& spec, int64_t pp_degree) {
  if (!spec.pipeline) throw Error("resolve_pipeline_run: the run has no pipeline plugin");
  const PipelineSettings& settings = spec.pipeline->settings();
  const int64_t microbatches = pipeline_microbatches(settings, spec.core.training.local_batch_size);
  // Validation runs the schedule forward only, on the same microbatch count.
  const ValidationConfig& validation = spec.core.validation;
  if (validation.enable && validation.local_batch_size % microbatches != 0) {
    throw Error("validation.local_batch_size (" + std::to_string(validation.local_batch_size) +
                ") does not split into the pipeline's " + std::to_string(microbatches) +
                " microbatches (validation runs the schedule forward only); set it to a multiple of " +
                std::to_string(microbatches));
  }
  std::optional<CsvSchedule> csv;
  int64_t default_stages = 0;
  if (!settings.schedule_csv.empty()) {
    csv = read_schedule_csv(settings.schedule_csv);
    default_stages = csv->shape.stages;
  } else {
    default_stages = pp_degree * spec.pipeline_schedule->stages_per_rank().min;
  }
  PipelineRun run;
  run.stage_modules = spec.pipeline->stage_modules(*spec.model, default_stages);
  PipelineShape shape;
  shape.ranks = pp_degree;
  shape.stages = static_cast<int64_t>(run.stage_modules.size());
  shape.microbatches = microbatches;
  run.program = csv ? compile_pipeline_csv(*csv, shape) : compile_pipeline(*spec.pipeline_schedule, shape);
  return run;
}

}  // namespace titan
