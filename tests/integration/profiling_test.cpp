// The profiling section: TorchTitan's schedule of traces, one Chrome trace
// per rank per period with LibTorch's ops and Titan's ranges (forward,
// backward, optimizer, collectives with their group and bytes), read back
// as JSON; and the refusal of a period too short for its warm-up and
// recorded steps.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include <set>

#include "test_support.hpp"

namespace fs = std::filesystem;
using titan::test::has;

namespace {

// The names of a trace's complete events ("ph": "X").
std::set<std::string> event_names(const fs::path& file) {
  auto trace = nlohmann::json::parse(titan::test::read_file(file));
  std::set<std::string> names;
  for (const auto& event : trace["traceEvents"]) {
    if (event.contains("name") && event.value("ph", "") == "X") names.insert(event["name"].get<std::string>());
  }
  return names;
}

bool any_starts_with(const std::set<std::string>& names, const std::string& prefix) {
  for (const auto& name : names) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string profiled_train_command(const fs::path& dump) {
  return titan::test::titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.threads=1 --set checkpoint.enable=false"
         " --set profiling.enable_profiling=true --set job.dump_folder=" +
         dump.string();
}

}  // namespace

TEST_SUITE("profiling") {
  TEST_CASE("profiling: one process writes a trace at the end of each period with ops and Titan's ranges") {
    fs::path dump = titan::test::temp_dir("profiling_one") / "out";
    // Periods of 3 steps: step 1 waits, step 2 warms up, step 3 is recorded.
    auto result = titan::test::run_command("timeout 300 " + profiled_train_command(dump) +
                                           " --set training.steps=6 --set training.local_batch_size=2"
                                           " --set profiling.profile_freq=3 --set profiling.profiler_warmup=1"
                                           " --set profiling.profiler_active=1");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    std::vector<std::string> iterations;
    for (const auto& entry : fs::directory_iterator(dump / "profile_traces")) {
      iterations.push_back(entry.path().filename().string());
    }
    std::sort(iterations.begin(), iterations.end());
    CHECK(iterations == std::vector<std::string>{"iteration_3", "iteration_6"});
    for (const auto& iteration : iterations) {
      CAPTURE(iteration);
      const std::set<std::string> names = event_names(dump / "profile_traces" / iteration / "rank0_trace.json");
      for (const char* range : {"forward_backward", "forward", "backward", "optimizer"}) {
        CHECK_MESSAGE(names.count(range) == 1, range);
      }
      CHECK(any_starts_with(names, "aten::"));
    }
  }

  TEST_CASE("profiling: under FSDP on 2 ranks every rank writes its trace with each collective's group and bytes") {
    fs::path dump = titan::test::temp_dir("profiling_fsdp") / "out";
    auto result = titan::test::run_command(
        "timeout 300 " + titan::test::titan_binary() +
        " launch --nproc-per-node 2 --master-port 29991 --grace-period-s 5 -- " + profiled_train_command(dump) +
        " --set training.steps=2 --set training.local_batch_size=2 --set 'plugins=[{name: fsdp}]'"
        " --set profiling.profile_freq=2 --set profiling.profiler_warmup=0 --set profiling.profiler_active=1");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    for (const char* rank : {"rank0_trace.json", "rank1_trace.json"}) {
      CAPTURE(rank);
      const std::set<std::string> names = event_names(dump / "profile_traces" / "iteration_2" / rank);
      CHECK(names.count("optimizer") == 1);
      bool gather = false;
      for (const auto& name : names) {
        // "all_gather dp_shard/pp0/dp_replicate0/cp0/tp0 12345 B"
        if (name.rfind("all_gather dp_shard", 0) == 0 && has(name, " B")) gather = true;
      }
      CHECK(gather);
    }
  }

  TEST_CASE("profiling: a profile_freq shorter than warm-up plus active steps is refused naming the keys") {
    fs::path dump = titan::test::temp_dir("profiling_refused") / "out";
    auto result = titan::test::run_command(titan::test::titan_binary() + " config check " +
                                           titan::test::source_dir() + "/configs/llama3_debugmodel.yaml" +
                                           " --set profiling.enable_profiling=true --set profiling.profile_freq=3"
                                           " --set profiling.profiler_warmup=3");
    CHECK(result.exit_code != 0);
    CHECK_MESSAGE(has(result.output, "profiling.profile_freq: 3 is less than profiler_warmup (3) + profiler_active (1)"),
                  result.output);
  }
}
