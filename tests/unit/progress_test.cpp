// Progress and ETA (metrics.progress): the live line on a terminal, the ETA
// appended to log lines otherwise, nothing when off.
#include "doctest_torch.hpp"

#include <cstdio>
#include <regex>
#include <string>

#include "titan/progress.hpp"
#include "test_support.hpp"

namespace {

std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) text.push_back(static_cast<char>(c));
  return text;
}

}  // namespace

TEST_SUITE("progress") {
  TEST_CASE("progress: durations read as a person writes them") {
    CHECK(titan::Progress::duration_text(0) == "0s");
    CHECK(titan::Progress::duration_text(44.6) == "45s");
    CHECK(titan::Progress::duration_text(130) == "2m10s");
    CHECK(titan::Progress::duration_text(3600 * 3 + 4 * 60 + 20) == "3h04m");
    CHECK(titan::Progress::duration_text(86400 * 2 + 5 * 3600) == "2d05h");
  }

  TEST_CASE("progress: on a terminal one line is redrawn and erased, the ETA counts the steps left") {
    std::FILE* out = std::tmpfile();
    REQUIRE(out != nullptr);
    titan::Progress progress(1, 10, /*enabled=*/true, /*live=*/true, out);
    CHECK(progress.eta_suffix().empty());  // nothing measured yet
    progress.step_done(1, 512);
    const double eta = progress.eta_seconds();
    CHECK(eta >= 0);
    CHECK(titan::test::has(progress.eta_suffix(), "  ETA "));
    progress.show();
    progress.clear();
    const std::string text = contents(out);
    CHECK(text.rfind("\r\033[2Kstep 1/10 (10%)  ", 0) == 0);
    CHECK(titan::test::has(text, "tokens/s  ETA "));
    CHECK(text.size() > 8);
    CHECK(text.substr(text.size() - 5) == "\r\033[2K");  // erased before the next log line
    CHECK(text.find('\n') == std::string::npos);
    std::fclose(out);
  }

  TEST_CASE("progress: off a terminal nothing is drawn, and when off there is no ETA either") {
    std::FILE* out = std::tmpfile();
    REQUIRE(out != nullptr);
    titan::Progress plain(1, 10, true, /*live=*/false, out);
    plain.step_done(1, 512);
    plain.show();
    plain.clear();
    CHECK(contents(out).empty());
    CHECK(titan::test::has(plain.eta_suffix(), "ETA"));
    titan::Progress off(1, 10, /*enabled=*/false, /*live=*/true, out);
    off.step_done(1, 512);
    off.show();
    CHECK(contents(out).empty());
    CHECK(off.eta_suffix().empty());
    CHECK(off.eta_seconds() < 0);
    std::fclose(out);
  }

  TEST_CASE("progress: titan train's log lines end with the ETA under a pipe, and metrics.progress=off drops it") {
    auto dump = titan::test::temp_dir("progress_train");
    const std::string run = "cd " + titan::test::source_dir() + " && " + titan::test::titan_binary() +
                            " train configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2"
                            " --set model.n_heads=4 --set training.seq_len=32 --set training.local_batch_size=2"
                            " --set training.steps=3 --set training.threads=1 --set metrics.log_freq=1"
                            " --set checkpoint.enable=false --set job.dump_folder=" +
                            (dump / "out").string();
    auto on = titan::test::run_command(run);
    REQUIRE_MESSAGE(on.exit_code == 0, on.output);
    CHECK_MESSAGE(std::regex_search(on.output, std::regex(R"(data +[0-9.]+%  ETA 0s)")), on.output);  // the last step: nothing left
    CHECK(on.output.find('\r') == std::string::npos);
    auto off = titan::test::run_command(run + " --set metrics.progress=off");
    REQUIRE_MESSAGE(off.exit_code == 0, off.output);
    CHECK(!titan::test::has(off.output, "ETA"));
    auto bad = titan::test::run_command(run + " --set metrics.progress=loud");
    CHECK(bad.exit_code != 0);
    CHECK_MESSAGE(titan::test::has(bad.output, "metrics.progress"), bad.output);
  }
}
