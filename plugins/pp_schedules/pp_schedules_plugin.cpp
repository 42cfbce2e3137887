// The pp_schedules plugin: TorchTitan's seven pipeline schedules, each
// registered under its pipeline_parallel_schedule name, with the limits on
// microbatches PyTorch enforces (refused before a run, naming the key).
#include <algorithm>
#include <functional>

#include "schedules.h"
#include "titan/error.hpp"
#include "titan/pipeline_schedule.hpp"
#include "titan/plugin.hpp"

namespace titan::pp_schedules {

namespace {

using Generate = RankActions (*)(const PipelineShape&);
using Validate = std::function<void(const std::string& name, const PipelineShape&)>;

class BuiltinSchedule : public PipelineSchedule {
 public:
  BuiltinSchedule(std::string name, StagePlacement placement, StagesPerRank range, Validate validate, Generate generate)
      : name_(std::move(name)), placement_(placement), range_(range), validate_(std::move(validate)), generate_(generate) {}
  std::string name() const override { return name_; }
  StagePlacement placement() const override { return placement_; }
  StagesPerRank stages_per_rank() const override { return range_; }
  void validate(const PipelineShape& shape) const override {
    if (validate_) validate_(name_, shape);
  }
  RankActions compute_actions(const PipelineShape& shape) const override { return generate_(shape); }

 private:
  std::string name_;
  StagePlacement placement_;
  StagesPerRank range_;
  Validate validate_;
  Generate generate_;
};

std::string microbatches_are(const PipelineShape& shape) {
  return std::string(kMicrobatchesKey) + " = " + std::to_string(shape.microbatches) + " (local_batch_size / " +
         kMicrobatchSizeKey + ")";
}

// At least `needed` microbatches, `why` naming what sets the minimum.
Validate at_least(std::function<int64_t(const PipelineShape&)> needed, std::string why) {
  return [needed = std::move(needed), why = std::move(why)](const std::string& name, const PipelineShape& shape) {
    const int64_t minimum = needed(shape);
    if (shape.microbatches >= minimum) return;
    throw Error(microbatches_are(shape) + " is fewer than pipeline_parallel_schedule " + name + " needs: at least " +
                std::to_string(minimum) + " (" + why + "); raise local_batch_size or lower " + kMicrobatchSizeKey);
  };
}

// PyTorch's interleaved schedules move microbatches in rounds of max(1, m / pp); m must split into them.
void whole_rounds(const std::string& name, const PipelineShape& shape) {
  const int64_t m = shape.microbatches;
  const int64_t rounds = std::max<int64_t>(1, m / shape.ranks);
  if (m % rounds == 0) return;
  int64_t below = m - 1, above = m + 1;
  while (below > 1 && below % std::max<int64_t>(1, below / shape.ranks) != 0) --below;
  while (above % std::max<int64_t>(1, above / shape.ranks) != 0) ++above;
  throw Error(microbatches_are(shape) + " does not split into pipeline_parallel_schedule " + name + "'s " +
              std::to_string(rounds) + " rounds (max(1, microbatches / " + kPipelineDegreeKey + " = " +
              std::to_string(shape.ranks) + ")), as PyTorch requires; use " + std::to_string(below) + " or " +
              std::to_string(above) + " microbatches (a multiple of " + kPipelineDegreeKey + " always works)");
}

void register_schedules(PluginRegistrar& registrar) {
  using Range = PipelineSchedule::StagesPerRank;
  const Range single{1, 1}, looped{2, 0}, two{2, 2};
  auto add = [&](const char* name, StagePlacement placement, Range range, Validate validate, Generate generate) {
    registrar.pipeline_schedule(name, [=](const PluginContext&) {
      return std::make_unique<BuiltinSchedule>(name, placement, range, validate, generate);
    });
  };
  add("GPipe", StagePlacement::loop, single, nullptr, gpipe);
  add("1F1B", StagePlacement::loop, single,
      at_least([](const PipelineShape& s) { return s.stages; }, "one per stage, as PyTorch requires"), one_f_one_b);
  add("Interleaved1F1B", StagePlacement::loop, looped, whole_rounds, interleaved_1f1b);
  add("LoopedBFS", StagePlacement::loop, looped, nullptr, looped_bfs);
  add("InterleavedZeroBubble", StagePlacement::loop, looped, whole_rounds, interleaved_zero_bubble);
  add("ZBVZeroBubble", StagePlacement::v, two, nullptr, zbv_zero_bubble);
  add("DualPipeV", StagePlacement::v, two,
      at_least([](const PipelineShape& s) { return s.stages; }, "one per stage, as PyTorch requires"), dual_pipe_v);
}

}  // namespace

}  // namespace titan::pp_schedules

TITAN_PLUGIN(TITAN_PLUGIN_NAME, "1.0", titan::kind_pipeline_schedule,
             "pipeline schedules: GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, "
             "DualPipeV",
             titan::pp_schedules::register_schedules)
