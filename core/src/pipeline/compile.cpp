// plan_pipeline: the one call that turns a schedule and a run's shape into
// checked per-rank lists, refusing shapes the schedule cannot run with the
// config key to change (TorchTitan hangs or fails late on some of these).
#include "titan/error.hpp"
#include "plan_internal.hpp"
#include "titan/pipeline_plan.hpp"

namespace titan {

namespace {

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
  std::string fix = range.max == 1
                        ? "set " + std::string(kLayersPerStageKey) + " so that there are " +
                              std::to_string(shape.ranks) + " stages, or choose a multi-stage schedule "
                              "(Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)"
                        : "set " + std::string(kLayersPerStageKey) + " so that there are " +
                              std::to_string(range.min * shape.ranks) + " stages (" + std::to_string(range.min) +
                              " x " + kPipelineDegreeKey + ")" +
                              (range.min > 1 ? ", or choose a single-stage schedule (GPipe, 1F1B)" : "");
  throw Error("pipeline_parallel_schedule " + name + " runs " + runs + " stage" + (range.min == 1 && range.max == 1 ? "" : "s") +
              " per rank, but " + kLayersPerStageKey + " gives " + std::to_string(shape.stages) + " stages on " +
              kPipelineDegreeKey + " = " + std::to_string(shape.ranks) + " (" + std::to_string(per_rank) +
              " per rank); " + fix);
}

}  // namespace

namespace pipeline_detail {

PipelinePlan finish_plan(std::string name, StagePlacement placement, const PipelineShape& shape, RankActions compute,
                         RankActions actions) {
  PipelinePlan plan;
  plan.timeline = check_pipeline(actions, placement, shape, name);
  plan.name = std::move(name);
  plan.placement = placement;
  plan.shape = shape;
  plan.compute = std::move(compute);
  plan.actions = std::move(actions);
  return plan;
}

}  // namespace pipeline_detail

void validate_pipeline_shape(const PipelineSchedule& schedule, const PipelineShape& shape) {
  check_shape(schedule, shape);
  schedule.validate(shape);
}

PipelinePlan plan_pipeline(const PipelineSchedule& schedule, const PipelineShape& shape) {
  validate_pipeline_shape(schedule, shape);
  RankActions compute = schedule.compute_actions(shape);
  const std::string label = "pipeline schedule " + schedule.name();
  if (static_cast<int64_t>(compute.size()) != shape.ranks) {
    throw Error(label + " returned lists for " + std::to_string(compute.size()) + " ranks, expected " +
                std::to_string(shape.ranks) + " (" + kPipelineDegreeKey + ")");
  }
  RankActions actions = lower_to_comm(compute, schedule.placement(), shape);
  PipelinePlan plan =
      pipeline_detail::finish_plan(label, schedule.placement(), shape, std::move(compute), std::move(actions));
  plan.name = schedule.name();
  return plan;
}

}  // namespace titan
