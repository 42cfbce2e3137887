// Checkpoint save cost as the training thread sees it: how long save()
// blocks with async_mode disabled (the whole write) against async (staging
// only; the write runs on a background thread), for a state of the given
// size, in one run. Usage: titan_bench_checkpoint [MiB] [repeats] [folder]
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "titan/checkpointer.hpp"
#include "titan/logging.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_checkpoint {

using titan::bench::seconds_since;
using titan::bench::median;

struct Timing {
  double blocked = 0;  // inside save()
  double total = 0;    // until the checkpoint is committed
};

std::unique_ptr<titan::Checkpointer> make_checkpointer(const std::string& mode, const std::string& folder) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse(
      "enable: true\nkeep_latest_k: 1\nfolder: " + folder + "/" + mode + "\nasync_mode: " + mode + "\n", "<bench>");
  context.training_steps = 1000000;
  auto checkpointer = titan::PluginRegistry::instance().create_checkpointer("dcp", context);
  checkpointer->attach({});
  return checkpointer;
}

// One save as a training loop does it: the next save (or the end) waits.
Timing time_save(titan::Checkpointer& checkpointer, titan::TrainState& state, int64_t step) {
  auto start = std::chrono::steady_clock::now();
  checkpointer.save(step, state);
  Timing timing;
  timing.blocked = seconds_since(start);
  checkpointer.wait();
  timing.total = seconds_since(start);
  return timing;
}

int main(int argc, char** argv) {
  int64_t mib = argc > 1 ? std::stoll(argv[1]) : 256;
  int repeats = argc > 2 ? std::stoi(argv[2]) : 3;
  std::string folder = argc > 3 ? argv[3] : (std::filesystem::temp_directory_path() / "titan_bench_checkpoint").string();
  titan::init_logging(0, "warn");
  titan::PluginRegistry::instance().load("dcp");
  titan::TrainState state;
  const int64_t per_tensor = 4 << 20;  // 16 MiB of fp32
  for (int64_t i = 0; i * 16 < mib; ++i) state.tensors["model.w" + std::to_string(i)] = at::randn({per_tensor});
  state.values = {{"step", "1"}, {"data.position", "0"}};
  std::vector<double> sync_blocked, async_blocked, sync_total, async_total;
  auto sync_checkpointer = make_checkpointer("disabled", folder);
  auto async_checkpointer = make_checkpointer("async", folder);
  // The first async save allocates its staging buffers; later ones reuse
  // them, as in training. Saves alternate so load changes hit both.
  Timing first_async = time_save(*async_checkpointer, state, 1);
  for (int r = 0; r < repeats; ++r) {
    Timing sync = time_save(*sync_checkpointer, state, r + 2);
    Timing async = time_save(*async_checkpointer, state, r + 2);
    sync_blocked.push_back(sync.blocked);
    sync_total.push_back(sync.total);
    async_blocked.push_back(async.blocked);
    async_total.push_back(async.total);
  }
  double reference = median(sync_blocked);
  std::printf("state %lld MiB, %d repeats (median), folder %s\n\n", static_cast<long long>(mib), repeats,
              folder.c_str());
  std::printf("| async_mode | blocks training (s) | ratio | until committed (s) |\n|---|---|---|---|\n");
  std::printf("| disabled   | %.3f | 1.000 | %.3f |\n", reference, median(sync_total));
  std::printf("| async      | %.3f | %.3f | %.3f |\n", median(async_blocked), median(async_blocked) / reference,
              median(async_total));
  std::printf("\nfirst async save (allocates the staging buffers): blocks %.3f s\n", first_async.blocked);
  std::filesystem::remove_all(folder);
  return 0;
}

}  // namespace titan_bench_checkpoint
