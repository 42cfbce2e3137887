// compile_pipeline: the one call that turns a schedule and a run's shape into
// checked per-rank lists, refusing shapes the schedule cannot run with the
// config key to change (TorchTitan hangs or fails late on some of these).
#include "titan/error.hpp"
#include "compile_internal.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/registry.hpp"

#include <c10/util/StringUtil.h>

namespace titan {

namespace {

// The loaded schedules with stages-per-rank ranges `fits` accepts, for a
// hint (the registry knows them; core names none).
template <class Fits>
std::string schedules_where(const Fits& fits) {
  auto& registry = PluginRegistry::instance();
  std::vector<std::string> names;
  for (const auto& name : registry.pipeline_schedules()) {
    try {
      if (fits(registry.create_pipeline_schedule(name, PluginContext{})->stages_per_rank())) names.push_back(name);
    } catch (const std::exception&) {
      // a schedule that needs options of its own is left out of the hint
    }
  }
  return c10::Join(", ", names);
}

void check_shape(const PipelineSchedule& schedule, const PipelineShape& shape) {
  const std::string name = schedule.name();
  if (shape.ranks < 1) {
    throw Error(std::string(kPipelineDegreeKey) + " = " + std::to_string(shape.ranks) + ": expected >= 1");
  }
  if (shape.microbatches < 1) {
    throw Error(std::string(kMicrobatchesKey) + " = " + std::to_string(shape.microbatches) +
                ": expected >= 1 (local_batch_size / " + kMicrobatchSizeKey + ")");
  }
  if (shape.stages < 1 || shape.stages % shape.ranks != 0) {
    throw Error(std::string(kLayersPerStageKey) + " gives " + std::to_string(shape.stages) + " stages, not a " +
                "multiple of " + kPipelineDegreeKey + " = " + std::to_string(shape.ranks) +
                ": every rank must hold the same number of stages");
  }
  const int64_t per_rank = shape.stages / shape.ranks;
  const PipelineSchedule::StagesPerRank range = schedule.stages_per_rank();
  const bool too_few = per_rank < range.min;
  const bool too_many = range.max > 0 && per_rank > range.max;
  if (!too_few && !too_many) return;
  std::string runs = range.min == range.max ? "exactly " + std::to_string(range.min)
                     : range.max == 0       ? "at least " + std::to_string(range.min)
                                            : std::to_string(range.min) + " to " + std::to_string(range.max);
  auto runs_per_rank = [per_rank](PipelineSchedule::StagesPerRank r) {
    return per_rank >= r.min && (r.max == 0 || per_rank <= r.max);
  };
  const std::string fitting = schedules_where(runs_per_rank);
  std::string fix = "set " + std::string(kLayersPerStageKey) + " so that there are " +
                    std::to_string(range.min * shape.ranks) + " stages" +
                    (range.min > 1 ? " (" + std::to_string(range.min) + " x " + kPipelineDegreeKey + ")" : "") +
                    (fitting.empty() ? "" : ", or choose a schedule that runs " + std::to_string(per_rank) +
                                                " per rank (" + fitting + ")");
  throw Error("pipeline_parallel_schedule " + name + " runs " + runs + " stage" + (range.min == 1 && range.max == 1 ? "" : "s") +
              " per rank, but " + kLayersPerStageKey + " gives " + std::to_string(shape.stages) + " stages on " +
              kPipelineDegreeKey + " = " + std::to_string(shape.ranks) + " (" + std::to_string(per_rank) +
              " per rank); " + fix);
}

}  // namespace

namespace pipeline_detail {

PipelineProgram finish_program(std::string name, StagePlacement placement, const PipelineShape& shape, RankActions compute,
                         RankActions actions) {
  PipelineProgram program;
  program.timeline = check_pipeline(actions, placement, shape, name);
  program.name = std::move(name);
  program.placement = placement;
  program.shape = shape;
  program.compute = std::move(compute);
  program.actions = std::move(actions);
  return program;
}

}  // namespace pipeline_detail

void validate_pipeline_shape(const PipelineSchedule& schedule, const PipelineShape& shape) {
  check_shape(schedule, shape);
  schedule.validate(shape);
}

PipelineProgram compile_pipeline(const PipelineSchedule& schedule, const PipelineShape& shape) {
  validate_pipeline_shape(schedule, shape);
  RankActions compute = schedule.compute_actions(shape);
  const std::string label = "pipeline schedule " + schedule.name();
  if (static_cast<int64_t>(compute.size()) != shape.ranks) {
    throw Error(label + " returned lists for " + std::to_string(compute.size()) + " ranks, expected " +
                std::to_string(shape.ranks) + " (" + kPipelineDegreeKey + ")");
  }
  RankActions actions = lower_to_comm(compute, schedule.placement(), shape);
  PipelineProgram program =
      pipeline_detail::finish_program(label, schedule.placement(), shape, std::move(compute), std::move(actions));
  program.name = schedule.name();
  return program;
}

}  // namespace titan
