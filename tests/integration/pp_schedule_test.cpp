// Pipeline schedules end to end: `titan pp-schedule` prints the checked
// lists, the bubble and an SVG timeline, and refuses a deadlocking CSV;
// titan-conformance passes the built-in schedules (each also trains on 2
// ranks like one process) and the pipeline plugin's split, and fails each
// wrong schedule and a split that forgets a block by check name.
#include "doctest_torch.hpp"

#include <regex>

#include "conformance_report.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using titan::test::conformance::conformance_json;
using titan::test::conformance::plugin_dir;
using titan::test::conformance::test_plugin;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("titan pp-schedule prints each rank's checked actions and the bubble, and writes an SVG timeline") {
  fs::path dir = titan::test::temp_dir("pp_schedule_cli");
  auto run = titan::test::run_command(titan::test::titan_binary() + " pp-schedule --schedule 1f1b --stages 4 "
                                      "--microbatches 8 --svg " + (dir / "1f1b.svg").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(has(run.output, "1F1B: pp 4, 4 stages, 8 microbatches, loop placement; the static check passed"));
  CHECK(has(run.output, "Rank 0 Rank 1 Rank 2 Rank 3"));
  // Steps are positions in each rank's list: rank r warms up with 4 - r forwards.
  CHECK(std::regex_search(run.output, std::regex("Step 00: 0F0 +1F0 +2F0 +3F0")));
  CHECK(std::regex_search(run.output, std::regex("Step 04: 0B0 +1F3 +2B1 +3F2")));
  CHECK(has(run.output, "bubble fraction: 0.2727"));  // (4-1)/(8+4-1)
  std::string svg = titan::test::read_file(dir / "1f1b.svg");
  CHECK(has(svg, "<svg"));
  CHECK(has(svg, ">rank 3</text>"));
  CHECK(count(svg, "class=\"F\"") == 32);  // 4 ranks x 8 forwards
  CHECK(count(svg, "class=\"B\"") == 32);

  auto zb = titan::test::run_command(titan::test::titan_binary() + " pp-schedule --schedule ZBVZeroBubble --ranks 2 "
                                     "--microbatches 4 --comm --svg " + (dir / "zbv.svg").string());
  INFO(zb.output);
  CHECK(zb.exit_code == 0);
  CHECK(has(zb.output, "pp 2, 4 stages, 4 microbatches, v placement"));
  CHECK(has(zb.output, "0SEND_F0"));
  CHECK(has(titan::test::read_file(dir / "zbv.svg"), "class=\"W\""));

  auto help = titan::test::run_command(titan::test::titan_binary() + " help");
  CHECK(has(help.output, "pp-schedule --schedule NAME"));
}

TEST_CASE("titan pp-schedule refuses a deadlocking CSV and a shape the schedule cannot run, naming the fault") {
  fs::path dir = titan::test::temp_dir("pp_schedule_cli_bad");
  titan::test::write_file(dir / "crossed.csv", "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n");
  auto deadlock = titan::test::run_command(titan::test::titan_binary() + " pp-schedule --csv " +
                                           (dir / "crossed.csv").string());
  INFO(deadlock.output);
  CHECK(deadlock.exit_code == 1);
  CHECK(has(deadlock.output, "crossed.csv (pp 2, 2 stages, 2 microbatches, loop placement) deadlocks"));
  CHECK(has(deadlock.output, "rank 0 blocks forever at step 2 (0RECV_B0, microbatch 0)"));

  auto few = titan::test::run_command(titan::test::titan_binary() +
                                      " pp-schedule --schedule 1F1B --stages 4 --microbatches 2");
  INFO(few.output);
  CHECK(few.exit_code == 1);
  CHECK(has(few.output, "num_pp_microbatches = 2"));
}

TEST_CASE("titan-conformance: the built-in pipeline schedules pass, training included, and wrong ones fail "
          "static_check by name") {
  std::vector<std::string> checks = {"pipeline_schedule.static_check", "pipeline_schedule.refusals_name_key",
                                     "pipeline_schedule.deterministic", "pipeline_schedule.accepts_some"};
  // Each schedule trains the 6-block model on 2 ranks like one process does.
  for (const char* schedule : {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                               "ZBVZeroBubble", "DualPipeV"}) {
    checks.push_back(std::string("pipeline_schedule.") + schedule + ".training@2");
  }
  auto builtin = conformance_json(plugin_dir() / "libtitan_plugin_pp_schedules.so");
  titan::test::conformance::check_all_pass(builtin, checks);
  CHECK(has(builtin.output, "max relative difference from one process over 3 steps (pp 2, 4 microbatches): loss "));
  auto wrong = conformance_json(test_plugin("wrong_pp_schedules"));
  INFO(wrong.output);
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.results["pipeline_schedule.static_check"] == "fail");
  CHECK(wrong.results["pipeline_schedule.deterministic"] == "pass");
  // Lists the trainer would refuse are not trained: skipped, never passed.
  for (const char* schedule : {"ForgetfulZB1F1B", "BackwardFirst1F1B", "CrossedWaits1F1B"}) {
    CHECK_MESSAGE(wrong.results[std::string("pipeline_schedule.") + schedule + ".training@2"] == "skip", schedule);
  }
  CHECK(has(wrong.output, "conformance check failed: pipeline_schedule.static_check"));
  CHECK(has(wrong.output, "ForgetfulZB1F1B (pp 2, 2 stages, 4 microbatches, loop placement): rank 0, microbatch 3: "
                          "runs 0I3"));
  CHECK(has(wrong.output, "backward of microbatch 0 of stage 1 before its forward"));
  CHECK(has(wrong.output, "CrossedWaits1F1B (pp 2, 2 stages, 4 microbatches, loop placement) deadlocks"));
}

TEST_CASE("titan-conformance: the pipeline split passes its split checks on 1 2 and 4 stages, and a split that "
          "forgets a block fails split_covers and split_cuts by name") {
  std::vector<std::string> checks;
  for (const char* check : {"split_count", "split_nonempty", "split_covers", "split_order", "split_cuts",
                            "split_deterministic"}) {
    for (const char* stages : {"@1", "@2", "@4"}) checks.push_back(std::string("parallelizer.") + check + stages);
  }
  auto pipeline = conformance_json(plugin_dir() / "libtitan_plugin_pipeline.so", "--ranks 1,2,4");
  titan::test::conformance::check_all_pass(pipeline, checks);
  CHECK(has(pipeline.output, "[tok_embeddings layers.0] | [layers.1 layers.2] | [layers.3 layers.4] | "
                             "[layers.5 norm output]"));
  auto forgetful = conformance_json(test_plugin("forgetful_split"), "--ranks 2");
  INFO(forgetful.output);
  CHECK(forgetful.exit_code == 1);
  CHECK(has(forgetful.output, "conformance check failed: parallelizer.split_covers@2 (layers.5 on no stage"));
  CHECK(has(forgetful.output, "conformance check failed: parallelizer.split_cuts@2"));
  for (const char* check : {"split_count@2", "split_nonempty@2", "split_order@2", "split_deterministic@2"}) {
    CHECK_MESSAGE(forgetful.results[std::string("parallelizer.") + check] == "pass", check);
  }
}
