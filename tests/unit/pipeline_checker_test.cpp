// The pipeline schedule contract in core, without any plugin: actions spell
// and parse as PyTorch's, stages sit where the placement says, lowering adds
// point-to-point only between ranks, and the static check refuses broken
// lists naming the rank, the action and the microbatch at fault.
#include "doctest_torch.hpp"

#include <map>
#include <sstream>

#include "test_support.hpp"
#include "titan/pipeline_program.hpp"

namespace titan {
// For doctest's messages on failed comparisons of action lists.
std::ostream& operator<<(std::ostream& out, const Action& action) { return out << action.to_string(); }
}  // namespace titan

using titan::Action;
using titan::ActionType;
using titan::PipelineShape;
using titan::RankActions;
using titan::StagePlacement;
using titan::test::has;

namespace {

// "0F0 0F1 0B0 | 1F0 ..." -> per-rank lists.
RankActions lists(const std::string& text) {
  RankActions ranks(1);
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    if (word == "|") ranks.emplace_back();
    else ranks.back().push_back(Action::parse(word));
  }
  return ranks;
}

std::string check_error(const RankActions& actions, const PipelineShape& shape,
                        StagePlacement placement = StagePlacement::loop) {
  try {
    titan::check_pipeline(actions, placement, shape, "test schedule");
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "<passed>";
}

std::string csv_error(const std::string& name, const std::string& text, const PipelineShape* shape = nullptr) {
  auto path = titan::test::temp_dir("pipeline_csv") / name;
  titan::test::write_file(path, text);
  try {
    auto csv = titan::read_schedule_csv(path.string());
    titan::compile_pipeline_csv(csv, shape ? *shape : csv.shape);
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "<passed>";
}

}  // namespace

TEST_SUITE("pipeline_checker") {
  TEST_CASE("actions print and parse in PyTorch's spelling; a bad one says what was expected") {
    for (const char* text : {"0F3", "12I0", "3W7", "1B2", "0SEND_F1", "1RECV_F1", "2SEND_B0", "1RECV_B5"}) {
      CHECK(Action::parse(text).to_string() == text);
    }
    CHECK(Action::parse(" 2SEND_B4 ") == Action{ActionType::send_backward, 2, 4});
    for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
             {"0X3", "unknown action type 'X3'"},
             {"F3", "no stage number"},
             {"0F", "no microbatch number"},
             {"0F3x", "is not a microbatch number"},
             {"1UNSHARD", "PyTorch-only"}}) {
      std::string error;
      try {
        Action::parse(text);
      } catch (const titan::Error& e) {
        error = e.what();
      }
      CHECK_MESSAGE(has(error, expected), error);
      CHECK_MESSAGE(has(error, "expected <stage><type><microbatch>"), error);
    }
  }

  TEST_CASE("loop and v placements put each stage on the rank PyTorch does") {
    const PipelineShape loop{4, 8, 1};
    CHECK(titan::stage_to_rank(StagePlacement::loop, loop, 5) == 1);
    CHECK(titan::rank_to_stages(StagePlacement::loop, loop, 1) == std::vector<int64_t>{1, 5});
    const PipelineShape v{4, 8, 1};
    CHECK(titan::rank_to_stages(StagePlacement::v, v, 1) == std::vector<int64_t>{1, 6});
    CHECK(titan::stage_to_rank(StagePlacement::v, v, 7) == 0);
    CHECK(titan::stage_to_rank(StagePlacement::v, v, 4) == 3);
    CHECK_THROWS_AS(titan::stage_to_rank(StagePlacement::v, PipelineShape{4, 12, 1}, 0), titan::Error);
    CHECK_THROWS_AS(titan::stage_to_rank(StagePlacement::loop, loop, 8), titan::Error);
  }

  TEST_CASE("lowering adds a send after the producer and a recv before the consumer, none within a rank") {
    // pp 2, v placement: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2 (the local middle hand-off).
    const PipelineShape shape{2, 4, 1};
    auto lowered = titan::lower_to_comm(lists("0F0 3F0 3B0 0B0 | 1F0 2F0 2B0 1B0"), StagePlacement::v, shape);
    CHECK(lowered == lists("0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0 | "
                           "1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0"));
    auto timeline = titan::check_pipeline(lowered, StagePlacement::v, shape, "v");
    // 0F0, 1F0, 2F0, 3F0 in turn (1 tick each), then 3B0, 2B0, 1B0, 0B0 (2 each): 12 ticks, each rank busy 6.
    CHECK(timeline.makespan == 12);
    CHECK(timeline.bubble_fraction == doctest::Approx(0.5));
  }

  TEST_CASE("a send and its matching recv name each other's rank and share one tag, distinct from every other") {
    const PipelineShape shape{2, 4, 3};
    RankActions lowered = titan::lower_to_comm(
        lists("0F0 0F1 0F2 3F0 3B0 3F1 3B1 3F2 3B2 0B0 0B1 0B2 | 1F0 2F0 1F1 2F1 1F2 2F2 2B0 1B0 2B1 1B1 2B2 1B2"),
        StagePlacement::v, shape);
    std::map<int, std::vector<std::pair<int64_t, Action>>> by_tag;  // tag -> (rank, action)
    for (int64_t r = 0; r < 2; ++r) {
      for (const Action& a : lowered[static_cast<size_t>(r)]) {
        if (titan::is_compute(a.type)) continue;
        auto p2p = titan::point_to_point(a, StagePlacement::v, shape);
        CHECK(p2p.peer == 1 - r);
        by_tag[p2p.tag].push_back({r, a});
      }
    }
    CHECK(by_tag.size() == 2 * 2 * 3);  // 2 remote boundaries x 2 directions x 3 microbatches
    for (const auto& [tag, ends] : by_tag) {
      REQUIRE(ends.size() == 2);
      CHECK(ends[0].first != ends[1].first);
      CHECK(ends[0].second.microbatch == ends[1].second.microbatch);
    }
    CHECK_THROWS_AS(titan::point_to_point(Action::parse("0F0"), StagePlacement::v, shape), titan::Error);
  }

  TEST_CASE("the static check refuses each kind of broken list, naming rank, action and microbatch") {
    const PipelineShape pp2{2, 2, 2};
    const auto lower = [&](const std::string& text) {
      return titan::lower_to_comm(lists(text), StagePlacement::loop, pp2);
    };
    // A correct 1F1B passes.
    CHECK(check_error(lower("0F0 0F1 0B0 0B1 | 1F0 1B0 1F1 1B1"), pp2) == "<passed>");

    // Rank 0 waits for the gradient of microbatch 0 while rank 1 waits for the activation of microbatch 1.
    std::string cycle = check_error(lower("0F0 0B0 0F1 0B1 | 1F0 1F1 1B0 1B1"), pp2);
    CHECK_MESSAGE(has(cycle, "deadlocks"), cycle);
    CHECK_MESSAGE(has(cycle, "rank 0 blocks forever at step 2 (0RECV_B0, microbatch 0): it waits for 1SEND_B0 from "
                             "rank 1, which is itself blocked at step 2 (1RECV_F1, microbatch 1)"), cycle);
    CHECK_MESSAGE(has(cycle, "rank 1 blocks forever at step 2 (1RECV_F1, microbatch 1): it waits for 0SEND_F1"), cycle);

    // With comm written out: rank 1 forgets to receive microbatch 1's input.
    std::string missing_recv = check_error(
        lists("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 | "
              "1RECV_F0 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1"), pp2);
    CHECK_MESSAGE(has(missing_recv, "rank 1, step 4 (1F1, microbatch 1): no 1RECV_F1 before it"), missing_recv);

    // A recv whose send never comes.
    std::string missing_send = check_error(
        lists("0F0 0SEND_F0 0F1 0RECV_B0 0B0 0RECV_B1 0B1 | 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"), pp2);
    CHECK_MESSAGE(has(missing_send, "rank 1 blocks forever at step 4 (1RECV_F1, microbatch 1): it waits for 0SEND_F1 "
                                    "from rank 0, whose list never sends it"), missing_send);

    std::string backward_first = check_error(lower("0F0 0F1 0B0 0B1 | 1B0 1F0 1F1 1B1"), pp2);
    CHECK_MESSAGE(has(backward_first, "rank 1, step 0 (1B0, microbatch 0): backward of microbatch 0 of stage 1 before "
                                      "its forward"), backward_first);

    std::string twice = check_error(lower("0F0 0F1 0I0 0W0 0I1 0W1 0W1 | 1F0 1I0 1W0 1F1 1I1 1W1"), pp2);
    CHECK_MESSAGE(has(twice, "(0W1, microbatch 1): runs the weight gradient (W) of microbatch 1 of stage 0 a second time"),
                  twice);

    std::string no_weight = check_error(lower("0F0 0F1 0I0 0W0 0I1 | 1F0 1I0 1W0 1F1 1I1 1W1"), pp2);
    CHECK_MESSAGE(has(no_weight, "rank 0, microbatch 1: runs 0I1 at rank 0 step"), no_weight);
    CHECK_MESSAGE(has(no_weight, "but never 0W1"), no_weight);

    std::string weight_first = check_error(lower("0F0 0F1 0W0 0I0 0I1 0W1 | 1F0 1I0 1W0 1F1 1I1 1W1"), pp2);
    CHECK_MESSAGE(has(weight_first, "(0W0, microbatch 0): W of microbatch 0 of stage 0 before its I"), weight_first);

    std::string wrong_rank = check_error(lists("1F0 | 0F0"), PipelineShape{2, 2, 1});
    CHECK_MESSAGE(has(wrong_rank, "rank 0, step 0 (1F0, microbatch 0): stage 1 belongs to rank 1 under the loop "
                                  "placement"), wrong_rank);

    std::string dropped = check_error(lower("0F0 0B0 | 1F0 1B0"), pp2);
    CHECK_MESSAGE(has(dropped, "rank 0, microbatch 1: never runs 0F1"), dropped);

    std::string v_local = check_error(lists("0F0 0SEND_F0 3RECV_F0 3F0 | 1RECV_F0 1F0 1SEND_F0"),
                                      PipelineShape{2, 4, 1}, StagePlacement::v);
    CHECK_MESSAGE(has(v_local, "(1SEND_F0, microbatch 0): stages 1 and 2 are both on rank 1"), v_local);

    std::string ranks = check_error(lists("0F0 0B0"), pp2);
    CHECK_MESSAGE(has(ranks, "lists for 1 ranks, but pipeline_parallel_degree is 2"), ranks);
  }

  TEST_CASE("CSV schedules: compute-only rows are lowered and checked; bad cells name file, row and column") {
    CHECK(csv_error("good.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n") == "<passed>");
    // The same with blanks and PyTorch's compute+comm format.
    CHECK(csv_error("comm.csv", "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,,\n") == "<passed>");

    std::string bad = csv_error("bad.csv", "0F0,0F1,0B0,0B1\n1F0, 1Q0 ,1F1,1B1\n");
    CHECK_MESSAGE(has(bad, "bad.csv: row 2 (rank 1, line 2), column 2: action '1Q0': unknown action type 'Q0'"), bad);

    std::string deadlock = csv_error("deadlock.csv", "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n");
    CHECK_MESSAGE(has(deadlock, "pipeline_parallel_schedule_csv"), deadlock);
    CHECK_MESSAGE(has(deadlock, "rank 0 blocks forever at step 2 (0RECV_B0, microbatch 0)"), deadlock);

    std::string missing_recv = csv_error("missing_recv.csv", "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                                             "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
    CHECK_MESSAGE(has(missing_recv, "rank 1, step 4 (1F1, microbatch 1): no 1RECV_F1 before it"), missing_recv);

    std::string misplaced = csv_error("misplaced.csv", "0F0,0B0,1F0\n1F0,1B0\n");
    CHECK_MESSAGE(has(misplaced, "misplaced.csv: row 1 (rank 0), column 3 ('1F0'): stage 1 belongs to rank 1"),
                  misplaced);

    const PipelineShape four_ranks{4, 4, 2};
    std::string ranks = csv_error("ranks.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", &four_ranks);
    CHECK_MESSAGE(has(ranks, "has rows (ranks): 2, but pipeline_parallel_degree gives 4"), ranks);

    // A V schedule is recognized from the stages each row runs.
    auto path = titan::test::temp_dir("pipeline_csv_v") / "v.csv";
    titan::test::write_file(path, "0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n");
    auto csv = titan::read_schedule_csv(path.string());
    CHECK(csv.placement == StagePlacement::v);
    auto plan = titan::compile_pipeline_csv(csv, csv.shape);
    CHECK(plan.actions[1] == lists("1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0")[0]);
  }
}
