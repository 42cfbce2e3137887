// profiling.enable_memory_snapshot on CPU: every rank's JSON snapshot at
// the end of each period, read back (the phases, the peak above every
// sample, the largest live allocations in order); a step that runs out of
// memory writes its snapshot and fails saying so, snapshots on or off; a
// folder outside the run's is refused.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using titan::test::has;

namespace {

std::string train_command(const fs::path& dump) {
  return titan::test::titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.local_batch_size=2 --set training.threads=1"
         " --set checkpoint.enable=false --set metrics.log_freq=100 --set job.dump_folder=" +
         dump.string();
}

std::vector<std::string> entries(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// What every period's snapshot must hold (docs/memory_snapshot.md).
void check_period_snapshot(const json& snapshot, int rank, int64_t first, int64_t last) {
  CHECK(snapshot["format"] == "titan.cpu_memory_snapshot");
  CHECK(snapshot["rank"] == rank);
  CHECK(snapshot["reason"] == "period");
  CHECK(snapshot["steps"]["first"] == first);
  CHECK(snapshot["steps"]["last"] == last);
  // Each phase of a step allocated, and the samples show it.
  std::set<std::string> sampled;
  const int64_t peak = snapshot["peak"]["bytes"];
  int64_t highest = 0;
  for (const auto& sample : snapshot["samples"]) {
    sampled.insert(sample["phase"].get<std::string>());
    const int64_t step = sample["step"];
    CHECK((step >= first && step <= last));
    highest = std::max(highest, sample["bytes"].get<int64_t>());
  }
  CHECK(highest > 0);
  CHECK(peak >= highest);  // the peak is the window's, not a sample's
  for (const char* phase : {"forward", "backward", "optimizer"}) {
    CAPTURE(phase);
    CHECK(sampled.count(phase) == 1);
    CHECK(snapshot["phases"][phase]["allocated_bytes"].get<int64_t>() > 0);
    CHECK(snapshot["phases"][phase]["max_live_bytes"].get<int64_t>() <= peak);
  }
  // The largest allocations live at the peak, largest first, within it.
  const json& top = snapshot["top_allocations"];
  REQUIRE(top.size() > 1);
  int64_t sum = 0;
  for (size_t i = 0; i < top.size(); ++i) {
    sum += top[i]["bytes"].get<int64_t>();
    if (i > 0) CHECK(top[i - 1]["bytes"].get<int64_t>() >= top[i]["bytes"].get<int64_t>());
  }
  CHECK(sum <= peak);
}

}  // namespace

TEST_SUITE("memory_snapshot") {
  TEST_CASE("memory_snapshot: under FSDP on 2 ranks every rank writes a CPU snapshot at the end of each period") {
    fs::path dump = titan::test::temp_dir("memory_snapshot_fsdp") / "out";
    // Periods of 2 steps; the profiler is off, so its warm-up (3) does not
    // bind profile_freq.
    auto result = titan::test::run_command(
        "timeout 300 " + titan::test::titan_binary() +
        " launch --nproc-per-node 2 --master-port 29987 --grace-period-s 5 -- " + train_command(dump) +
        " --set training.steps=4 --set 'plugins=[{name: fsdp}]' --set profiling.enable_memory_snapshot=true"
        " --set profiling.profile_freq=2");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    const fs::path folder = dump / "memory_snapshot";
    CHECK(entries(folder) == std::vector<std::string>{"iteration_2", "iteration_4"});
    for (int rank : {0, 1}) {
      for (int64_t last : {2, 4}) {
        CAPTURE(rank);
        CAPTURE(last);
        const fs::path file = folder / ("iteration_" + std::to_string(last)) /
                              ("rank" + std::to_string(rank) + "_memory_snapshot.json");
        REQUIRE(fs::exists(file));
        check_period_snapshot(json::parse(titan::test::read_file(file)), rank, last - 1, last);
      }
    }
  }

  TEST_CASE("memory_snapshot: a step out of memory writes its snapshot and fails naming the step, the file and what to do") {
    fs::path dump = titan::test::temp_dir("memory_snapshot_oom") / "out";
    // debug.inject_out_of_memory_at_step: step 3's forward asks LibTorch's
    // CPU allocator for 1 PiB, which it refuses as it would any allocation
    // beyond the machine (nothing is touched).
    auto result = titan::test::run_command("timeout 300 " + train_command(dump) +
                                           " --set training.steps=4 --set profiling.enable_memory_snapshot=true"
                                           " --set profiling.profile_freq=2 --set debug.inject_out_of_memory_at_step=3");
    CHECK(result.exit_code != 0);
    const fs::path file = dump / "memory_snapshot" / "iteration_2_exit" / "rank0_memory_snapshot.json";
    CHECK_MESSAGE(has(result.output, "step 3 ran out of memory on rank 0 (cpu)"), result.output);
    CHECK_MESSAGE(has(result.output, "Memory snapshot: " + file.string()), result.output);
    CHECK_MESSAGE(has(result.output, "lower training.local_batch_size"), result.output);
    CHECK_MESSAGE(!has(result.output, "training done"), result.output);
    CHECK(entries(dump / "memory_snapshot") == std::vector<std::string>{"iteration_2", "iteration_2_exit"});
    REQUIRE(fs::exists(file));
    const json snapshot = json::parse(titan::test::read_file(file));
    CHECK(snapshot["reason"] == "out_of_memory");
    CHECK(snapshot["steps"]["first"] == 3);
    const json& failed = snapshot["failed_allocation"];
    CHECK(failed["bytes"] == int64_t{1} << 50);
    CHECK(failed["phase"] == "forward");
    CHECK(failed["step"] == 3);
    CHECK(failed["live_bytes"].get<int64_t>() > 0);

    // Snapshots off: the same failure, the same exit, a pointer to them.
    fs::path plain = titan::test::temp_dir("memory_snapshot_oom_plain") / "out";
    auto off = titan::test::run_command("timeout 300 " + train_command(plain) +
                                        " --set training.steps=1 --set debug.inject_out_of_memory_at_step=1");
    CHECK(off.exit_code != 0);
    CHECK_MESSAGE(has(off.output, "step 1 ran out of memory on rank 0 (cpu)"), off.output);
    CHECK_MESSAGE(has(off.output, "Set profiling.enable_memory_snapshot=true"), off.output);
    CHECK(!fs::exists(plain / "memory_snapshot"));
  }

  TEST_CASE("memory_snapshot: a snapshot folder outside job.dump_folder is refused naming the key") {
    // '' in YAML: the empty string.
    for (const std::string folder : {"/tmp/snapshots", "../snapshots", "''"}) {
      CAPTURE(folder);
      auto result = titan::test::run_command(titan::test::titan_binary() + " config check " +
                                             titan::test::source_dir() + "/configs/llama3_debugmodel.yaml" +
                                             " --set \"profiling.save_memory_snapshot_folder=" + folder + "\"");
      CHECK(result.exit_code != 0);
      CHECK_MESSAGE(has(result.output, "profiling.save_memory_snapshot_folder: expected a folder name inside "
                                       "job.dump_folder"),
                    result.output);
    }
  }
}
