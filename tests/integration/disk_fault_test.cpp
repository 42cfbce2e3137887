// Disk faults while saving (docs/reliability.md): the checkpoint folder on a
// tmpfs that fills up, or that turns read-only. The save fails with the
// folder and the system's reason, training stops with a non-zero exit, the
// previous checkpoint stays committed and intact, nothing half-written is
// taken for a checkpoint, and once the disk is fixed the job resumes from
// that checkpoint and ends bit for bit equal to an uninterrupted run.
// Needs root (mount); a shard deleted between save and resume is covered by
// dcp_e2e_test.cpp ("a missing shard ... resume falls back").
#include "doctest_torch.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::run_command;

// A tmpfs mounted for the test's lifetime.
class Tmpfs {
 public:
  Tmpfs(const fs::path& where, const std::string& size) : where_(where) {
    fs::create_directories(where_);
    auto mounted = run_command("mount -t tmpfs -o size=" + size + " tmpfs " + where_.string());
    INFO(mounted.output);
    REQUIRE_MESSAGE(mounted.exit_code == 0, "mounting a tmpfs needs root (the suite runs as root on CI)");
  }
  ~Tmpfs() { run_command("umount " + where_.string()); }
  void remount(const std::string& options) {
    auto result = run_command("mount -o remount," + options + " " + where_.string());
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
  }

 private:
  fs::path where_;
};

std::string disk_fault_train(const fs::path& dump, const fs::path& checkpoints) {
  return "timeout 120 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.threads=1 --set training.local_batch_size=4"
         " --set training.steps=6 --set lr_scheduler.warmup_steps=2 --set checkpoint.enable=true"
         " --set checkpoint.interval=2"
         " --set checkpoint.keep_latest_k=0 --set checkpoint.folder=" + checkpoints.string() +
         " --set debug.save_final_model=" + (dump / "final.pt").string() + " --set job.dump_folder=" + dump.string();
}

// The committed step folders, in order.
std::vector<std::string> committed(const fs::path& checkpoints) {
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Each test its own reference folder: ctest runs them in parallel.
std::string reference_final(const std::string& name) {
  fs::path dump = titan::test::temp_dir(name);
  auto result = run_command(disk_fault_train(dump, dump / "checkpoint"));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return titan::test::read_file(dump / "final.pt");
}

// After the failed run: step-2 only is committed; the fixed disk resumes it
// and the job ends as the uninterrupted one did.
void check_recovery(const fs::path& dump, const fs::path& checkpoints, const std::string& expected_final) {
  CHECK(committed(checkpoints) == std::vector<std::string>{"step-2"});
  auto resumed = run_command(disk_fault_train(dump, checkpoints));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resumed from checkpoint at step 2") != std::string::npos);
  CHECK(titan::test::read_file(dump / "final.pt") == expected_final);
  // Run again: the step-6 checkpoint already finished the run. It says so and
  // exits 0, with no step and no made-up loss.
  auto again = run_command(disk_fault_train(dump, checkpoints));
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("the checkpoint at step 6 already finished this run (training.steps = 6)") !=
        std::string::npos);
  CHECK(again.output.find("training done") == std::string::npos);
}

}  // namespace

TEST_CASE("disk faults: a checkpoint folder that fills up stops training with the reason, keeps step 2, and the job "
          "resumes from it bit for bit once there is room") {
  const std::string expected = reference_final("disk_full_reference");
  fs::path dump = titan::test::temp_dir("disk_full");
  fs::path checkpoints = dump / "small_disk";
  Tmpfs disk(checkpoints, "5m");  // one checkpoint of this model (~4 MB) fits, two do not
  auto full = run_command(disk_fault_train(dump, checkpoints));
  INFO(full.output);
  CHECK(full.exit_code != 0);
  CHECK(full.output.find("checkpoint of step 4 was not committed") != std::string::npos);
  CHECK(full.output.find("No space left on device") != std::string::npos);
  CHECK(full.output.find("earlier checkpoints are intact") != std::string::npos);
  disk.remount("size=64m");
  check_recovery(dump, checkpoints, expected);
}

TEST_CASE("disk faults: a checkpoint folder that turns read-only stops training at the next save with the reason, "
          "keeps step 2, and the job resumes from it bit for bit once it is writable") {
  const std::string expected = reference_final("disk_read_only_reference");
  fs::path dump = titan::test::temp_dir("disk_read_only");
  fs::path checkpoints = dump / "disk";
  Tmpfs disk(checkpoints, "64m");
  // Train to step 2 (saved), then the folder turns read-only.
  auto first = run_command(disk_fault_train(dump, checkpoints) + " --set training.steps=2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  disk.remount("ro");
  // 6 steps from the step-2 checkpoint: it loads, then the step-4 save fails.
  auto read_only = run_command(disk_fault_train(dump, checkpoints));
  INFO(read_only.output);
  CHECK(read_only.exit_code != 0);
  CHECK(read_only.output.find("resumed from checkpoint at step 2") != std::string::npos);
  CHECK(read_only.output.find("Read-only file system") != std::string::npos);
  CHECK(read_only.output.find(checkpoints.string()) != std::string::npos);
  disk.remount("rw");
  check_recovery(dump, checkpoints, expected);
}
