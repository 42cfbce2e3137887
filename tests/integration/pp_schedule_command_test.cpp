// The `titan pp-schedule` command: it prints each rank's checked action
// lists, the bubble and an SVG timeline, and refuses a deadlocking CSV or a
// shape the schedule cannot run. (The schedules' and the split's
// titan-conformance runs are in pipeline_e2e_test.cpp.)
#include "doctest_torch.hpp"

#include <regex>

#include "test_support.hpp"

namespace fs = std::filesystem;

using titan::test::has;

namespace {

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
