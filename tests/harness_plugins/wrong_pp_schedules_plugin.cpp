// Three deliberately wrong pipeline schedules, each a plausible slip in a
// single-stage 1F1B, that titan-conformance's pipeline_schedule.static_check
// must refuse by name: one forgets the last weight gradient, one runs the
// last stage's first backward before its forward, and one makes rank 0 wait
// for a gradient while rank 1 waits for rank 0's next activation.
#include <algorithm>
#include <memory>

#include "titan/pipeline_schedule.hpp"
#include "test_plugin.hpp"

namespace {

using titan::Action;
using titan::ActionType;
using titan::PipelineShape;
using titan::RankActions;

enum class Slip { forget_weight, backward_first, crossed_waits };

class WrongSchedule : public titan::PipelineSchedule {
 public:
  WrongSchedule(const char* name, Slip slip) : name_(name), slip_(slip) {}
  std::string name() const override { return name_; }
  titan::StagePlacement placement() const override { return titan::StagePlacement::loop; }
  StagesPerRank stages_per_rank() const override { return {1, 1}; }
  void validate(const PipelineShape&) const override {}
  RankActions compute_actions(const PipelineShape& shape) const override {
    RankActions ranks(static_cast<size_t>(shape.ranks));
    for (int64_t r = 0; r < shape.ranks; ++r) {
      auto& out = ranks[static_cast<size_t>(r)];
      const int64_t warmup = std::min(shape.microbatches, shape.ranks - r);
      // crossed_waits: the last rank runs every forward first (GPipe-like) while the others run 1F1B.
      const bool all_forwards_first = slip_ == Slip::crossed_waits && r == shape.ranks - 1;
      const int64_t first = all_forwards_first ? shape.microbatches : warmup;
      for (int64_t m = 0; m < first; ++m) out.push_back({ActionType::forward, r, m});
      for (int64_t m = 0; m < shape.microbatches; ++m) {
        out.push_back({ActionType::backward_input, r, m});
        const bool forget = slip_ == Slip::forget_weight && r == 0 && m == shape.microbatches - 1;
        if (!forget) out.push_back({ActionType::backward_weight, r, m});
        if (first + m < shape.microbatches) out.push_back({ActionType::forward, r, first + m});
      }
      if (slip_ == Slip::backward_first && r == shape.ranks - 1) {
        std::swap(out[0], out[1]);  // 1I0 before 1F0
      }
    }
    return ranks;
  }

 private:
  std::string name_;
  Slip slip_;
};

void register_wrong(titan::PluginRegistrar& registrar) {
  auto add = [&](const char* name, Slip slip) {
    registrar.pipeline_schedule(name, [=](const titan::PluginContext&) { return std::make_unique<WrongSchedule>(name, slip); });
  };
  add("ForgetfulZB1F1B", Slip::forget_weight);
  add("BackwardFirst1F1B", Slip::backward_first);
  add("CrossedWaits1F1B", Slip::crossed_waits);
}

}  // namespace

TITAN_TEST_PLUGIN(wrong_pp_schedules, "1.0", titan::kind_pipeline_schedule,
             "three wrong 1F1B schedules for the conformance tests", register_wrong)
