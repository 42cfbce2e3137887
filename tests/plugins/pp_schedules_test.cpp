// TorchTitan's pipeline schedules (plugins/pp_schedules) through the
// registry: every schedule at PP2 and PP4 with several microbatch counts
// gives lists that pass the static check, run each local (stage,
// microbatch) forward and backward exactly once on the right rank, and have
// the bubbles theory says; shapes a schedule cannot run are refused naming
// the key.
#include "doctest_torch.hpp"

#include <map>

#include "test_support.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/registry.hpp"

using titan::ActionType;
using titan::PipelineShape;
using titan::test::has;

namespace {

std::unique_ptr<titan::PipelineSchedule> schedule(const std::string& name) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("{}", "test.yaml");
  return titan::PluginRegistry::instance().create_pipeline_schedule(name, context);
}

titan::PipelineProgram program(const std::string& name, int64_t ranks, int64_t microbatches) {
  auto s = schedule(name);
  return titan::compile_pipeline(*s, PipelineShape{ranks, ranks * s->stages_per_rank().min, microbatches});
}

std::string schedule_refusal(const std::string& name, const PipelineShape& shape) {
  try {
    titan::compile_pipeline(*schedule(name), shape);
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "<accepted>";
}

const std::vector<std::string> kSchedules = {"GPipe",         "1F1B",          "Interleaved1F1B", "LoopedBFS",
                                             "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"};

}  // namespace

TEST_SUITE("pp_schedules") {
  TEST_CASE("every schedule at PP2 and PP4 with two microbatch counts passes the static check, each local stage "
            "running each microbatch's F once and its B (or I and W) once") {
    for (const auto& name : kSchedules) {
      for (int64_t p : {2, 4}) {
        // DualPipeV needs a microbatch per stage (2 pp); the others run from pp.
        for (int64_t m : {name == "DualPipeV" ? 2 * p : p, 2 * p + 4}) {
          CAPTURE(name);
          CAPTURE(p);
          CAPTURE(m);
          titan::PipelineProgram program_ = program(name, p, m);
          REQUIRE(program_.compute.size() == static_cast<size_t>(p));
          for (int64_t r = 0; r < p; ++r) {
            const auto local = titan::rank_to_stages(program_.placement, program_.shape, r);
            std::map<std::pair<int64_t, ActionType>, int64_t> counts;
            for (const auto& action : program_.compute[static_cast<size_t>(r)]) {
              CHECK(std::find(local.begin(), local.end(), action.stage) != local.end());
              ++counts[{action.stage * 1000 + action.microbatch, action.type}];
            }
            for (int64_t s : local) {
              for (int64_t mb = 0; mb < m; ++mb) {
                const int64_t key = s * 1000 + mb;
                CHECK(counts[{key, ActionType::forward}] == 1);
                const int64_t full = counts[{key, ActionType::full_backward}];
                const int64_t input = counts[{key, ActionType::backward_input}];
                CHECK(counts[{key, ActionType::backward_weight}] == input);
                CHECK(full + input == 1);
              }
            }
            CHECK(program_.compute[static_cast<size_t>(r)].size() >= local.size() * static_cast<size_t>(2 * m));
          }
        }
      }
    }
  }

  TEST_CASE("GPipe and 1F1B bubbles equal (p-1)/(m+p-1); the interleaved ones shrink it by the stages per rank") {
    for (int64_t p : {2, 4}) {
      for (int64_t m : {4, 8, 12}) {
        CAPTURE(p);
        CAPTURE(m);
        const double closed = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
        CHECK(program("GPipe", p, m).timeline.bubble_fraction == doctest::Approx(closed));
        CHECK(program("1F1B", p, m).timeline.bubble_fraction == doctest::Approx(closed));
        // Megatron's interleaved bound with v = 2 stages per rank (m a multiple of p).
        if (m % p == 0) {
          CHECK(program("Interleaved1F1B", p, m).timeline.bubble_fraction ==
                doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(2 * m + p - 1)));
        }
      }
    }
  }

  TEST_CASE("the zero-bubble schedules have a smaller bubble than 1F1B at the same pp and microbatches") {
    for (int64_t p : {2, 4}) {
      for (int64_t m : {2 * p, 4 * p}) {
        CAPTURE(p);
        CAPTURE(m);
        const double one_f_one_b = program("1F1B", p, m).timeline.bubble_fraction;
        for (const char* name : {"InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}) {
          CAPTURE(name);
          CHECK(program(name, p, m).timeline.bubble_fraction < one_f_one_b);
        }
        // Splitting W off is what buys it: the same interleaving with full backwards is worse.
        CHECK(program("InterleavedZeroBubble", p, m).timeline.bubble_fraction <
              program("Interleaved1F1B", p, m).timeline.bubble_fraction);
      }
    }
  }

  TEST_CASE("shapes a schedule cannot run are refused naming the key, its value and what works") {
    std::string few = schedule_refusal("1F1B", {4, 4, 2});
    CHECK_MESSAGE(has(few, "num_pp_microbatches = 2"), few);
    CHECK_MESSAGE(has(few, "fewer than pipeline_parallel_schedule 1F1B needs: at least 4"), few);
    std::string dual = schedule_refusal("DualPipeV", {2, 4, 3});
    CHECK_MESSAGE(has(dual, "DualPipeV needs: at least 4"), dual);
    std::string rounds = schedule_refusal("Interleaved1F1B", {2, 4, 5});
    CHECK_MESSAGE(has(rounds, "num_pp_microbatches = 5"), rounds);
    CHECK_MESSAGE(has(rounds, "use 4 or 6 microbatches"), rounds);
    std::string single = schedule_refusal("GPipe", {2, 4, 4});
    CHECK_MESSAGE(has(single, "GPipe runs exactly 1 stage per rank"), single);
    CHECK_MESSAGE(has(single, "pipeline_parallel_layers_per_stage gives 4 stages on pipeline_parallel_degree = 2"),
                  single);
    std::string v = schedule_refusal("ZBVZeroBubble", {2, 6, 4});
    CHECK_MESSAGE(has(v, "ZBVZeroBubble runs exactly 2 stages per rank"), v);
    std::string multi = schedule_refusal("LoopedBFS", {2, 2, 4});
    CHECK_MESSAGE(has(multi, "at least 2 stages per rank"), multi);
    std::string uneven = schedule_refusal("Interleaved1F1B", {4, 6, 4});
    CHECK_MESSAGE(has(uneven, "6 stages, not a multiple of pipeline_parallel_degree = 4"), uneven);
  }

  TEST_CASE("names are case-insensitive as TorchTitan's; an unknown one suggests the closest") {
    CHECK(schedule("interleaved1f1b")->name() == "Interleaved1F1B");
    CHECK(schedule("zbvzerobubble")->placement() == titan::StagePlacement::v);
    std::string error;
    try {
      schedule("1F1C");
    } catch (const titan::Error& e) {
      error = e.what();
    }
    CHECK_MESSAGE(has(error, "did you mean '1F1B'?"), error);
    auto names = titan::PluginRegistry::instance().pipeline_schedules();
    for (const auto& name : kSchedules) CHECK(std::find(names.begin(), names.end(), name) != names.end());
  }

  TEST_CASE("V schedules hand stage pp-1's output to stage pp in memory: no send or recv between them") {
    for (const char* name : {"ZBVZeroBubble", "DualPipeV"}) {
      titan::PipelineProgram v = program(name, 4, 8);
      int64_t comm = 0;
      for (const auto& rank : v.actions) {
        for (const auto& action : rank) {
          if (titan::is_compute(action.type)) continue;
          ++comm;
          CHECK_MESSAGE(!(action.type == ActionType::send_forward && action.stage == 3), action.to_string());
          CHECK_MESSAGE(!(action.type == ActionType::recv_forward && action.stage == 4), action.to_string());
        }
      }
      // 6 remote boundaries (8 stages, the middle one local) x 8 microbatches x (send + recv) x 2 directions.
      CHECK(comm == 6 * 8 * 2 * 2);
    }
  }
}
