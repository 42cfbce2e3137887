// Flight recorder overhead: step time of the debug model trained with FSDP
// (one rank, so every collective still goes through the comm layer and its
// observers) with and without the `flight_recorder` plugin, alternated in
// one run; plus the recorder's own cost per collective, measured directly,
// times the collectives per step, which stays readable when the machine is
// too noisy to resolve a 1% difference in step time.
// Usage: titan_bench_flight_recorder [timed_steps] [repeats] [threads]
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench_training.hpp"
#include "titan/logging.hpp"
#include "titan/registry.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_flight_recorder {

using titan::bench::seconds_since;
using titan::bench::median;

std::string run_yaml(int steps, int threads, const std::string& dump, bool recorder) {
  return titan::bench::debug_model_run(
      steps, threads, dump, 128,
      "plugins: [{name: fsdp}" + std::string(recorder ? ", {name: flight_recorder}" : "") + "]\n");
}

std::filesystem::path dump_folder() { return std::filesystem::temp_directory_path() / "titan_bench_flight_recorder"; }

double seconds_per_step(int steps, int warmup, int threads, bool recorder) {
  auto yaml_for = [&](int n) { return run_yaml(n, threads, dump_folder().string(), recorder); };
  return titan::bench::seconds_per_step(yaml_for, dump_folder(), steps, warmup);
}

// The recorder's observer calls for one collective (enqueue, start, complete),
// with an event shaped like an FSDP all-gather.
double recorder_seconds_per_collective(int iterations) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("name: flight_recorder\n", "bench.yaml");
  context.dump_folder = dump_folder().string();
  auto recorder = titan::PluginRegistry::instance().create_comm_observer("flight_recorder", context);
  titan::CollectiveEvent event;
  event.op = "all_gather";
  event.group = "dp_shard";
  event.group_ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  event.shapes = {{1 << 20}};
  event.dtype = "Float";
  event.bytes = 4 << 20;
  event.call_site = "step 12 / fsdp all_gather layers.3";
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    event.sequence = static_cast<uint64_t>(i);
    event.time_s = i;
    recorder->on_enqueue(event);
    recorder->on_start(event);
    recorder->on_complete(event, true);
  }
  return seconds_since(start) / iterations;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 4;
  int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  int threads = argc > 3 ? std::atoi(argv[3]) : static_cast<int>(std::thread::hardware_concurrency());
  titan::init_logging(0, "warn");
  at::set_num_threads(threads);

  double per_collective = recorder_seconds_per_collective(200000);
  std::atomic<int64_t> collectives{0};
  titan::bench::train_seconds(run_yaml(3, threads, dump_folder().string(), false), dump_folder(), &collectives);
  const double per_step_collectives = collectives.load() / 3.0;  // includes setup: an overestimate

  // Alternate the two so that drift in machine load hits both alike.
  std::vector<double> without, with;
  for (int r = 0; r < repeats; ++r) {
    without.push_back(seconds_per_step(steps, 2, threads, false));
    with.push_back(seconds_per_step(steps, 2, threads, true));
    std::fprintf(stderr, "repeat %d: %.4f s/step without, %.4f with\n", r, without.back(), with.back());
  }
  double base = median(without), recorded = median(with);
  double modelled = per_step_collectives * per_collective / base;

  std::printf("\nflight recorder overhead, llama3 debugmodel, FSDP on 1 rank, batch 8 x seq 128, %d threads, "
              "%d timed steps x %d repeats (median)\n",
              threads, steps, repeats);
  std::printf("| run                              | s/step  | ratio |\n|---|---|---|\n");
  std::printf("| fsdp, no recorder                | %.4f | 1.000 |\n", base);
  std::printf("| fsdp + flight_recorder           | %.4f | %.3f |\n", recorded, recorded / base);
  std::printf("\n| recorder cost                    | value |\n|---|---|\n");
  std::printf("| per collective (enqueue+start+complete) | %.2f us |\n", per_collective * 1e6);
  std::printf("| collectives per step (upper bound) | %.1f |\n", per_step_collectives);
  std::printf("| modelled overhead per step       | %.5f%% |\n", modelled * 100);
  return 0;
}

}  // namespace titan_bench_flight_recorder
