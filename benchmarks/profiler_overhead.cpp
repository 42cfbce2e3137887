// Profiler overhead: step time of the debug model (FSDP on one rank, so
// every collective goes through the comm layer and its observers) with
// profiling off, on but outside its active window, and recording one step
// in every two; alternated in one run. Plus the direct cost of one of
// Titan's profile ranges with no profiler running, times the ranges a step
// opens, which stays readable when the machine is too noisy to resolve a 1%
// difference in step time.
// Usage: titan_bench_profiler [timed_steps] [repeats] [threads]
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "bench_training.hpp"
#include "titan/logging.hpp"
#include "titan/profile_range.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_profiler {

using titan::bench::median;
using titan::bench::seconds_since;

enum class Profiling { off, outside_window, recording };
const char* kNames[] = {"profiling off", "on, outside its window", "on, recording 1 step in 2"};

std::string run_yaml(int steps, int threads, const std::string& dump, Profiling profiling) {
  std::string section = "profiling: {enable_profiling: false}\n";
  // The first window would end at step 1000: every timed step is outside it.
  if (profiling == Profiling::outside_window) {
    section = "profiling: {enable_profiling: true, profile_freq: 1000, profiler_warmup: 0, profiler_active: 1}\n";
  }
  if (profiling == Profiling::recording) {
    section = "profiling: {enable_profiling: true, profile_freq: 2, profiler_warmup: 0, profiler_active: 1}\n";
  }
  return titan::bench::debug_model_run(steps, threads, dump, 128, "plugins: [{name: fsdp}]\n" + section);
}

std::filesystem::path dump_folder() { return std::filesystem::temp_directory_path() / "titan_bench_profiler"; }

double seconds_per_step(int steps, int warmup, int threads, Profiling profiling) {
  auto yaml_for = [&](int n) { return run_yaml(n, threads, dump_folder().string(), profiling); };
  return titan::bench::seconds_per_step(yaml_for, dump_folder(), steps, warmup);
}

// One ProfileRange opened and closed with no profiler running.
double seconds_per_range(int iterations) {
  const std::string name = "all_gather dp_shard 369792 B";
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) titan::ProfileRange range(name);
  return seconds_since(start) / iterations;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 4;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  const int threads = argc > 3 ? std::atoi(argv[3]) : static_cast<int>(std::thread::hardware_concurrency());
  titan::init_logging(0, "warn");
  at::set_num_threads(threads);

  const double per_range = seconds_per_range(1000000);
  std::atomic<int64_t> collectives{0};
  titan::bench::train_seconds(run_yaml(3, threads, dump_folder().string(), Profiling::off), dump_folder(),
                              &collectives);
  // Each collective opens a range; a step adds forward_backward, forward,
  // backward and optimizer. Setup's collectives count too: an overestimate.
  const double ranges_per_step = collectives.load() / 3.0 + 4;

  // Alternate the three so that drift in machine load hits each alike.
  std::vector<double> seconds[3];
  for (int r = 0; r < repeats; ++r) {
    for (int mode = 0; mode < 3; ++mode) {
      seconds[mode].push_back(seconds_per_step(steps, 2, threads, static_cast<Profiling>(mode)));
    }
    std::fprintf(stderr, "repeat %d: %.4f / %.4f / %.4f s/step\n", r, seconds[0].back(), seconds[1].back(),
                 seconds[2].back());
  }
  const double base = median(seconds[0]);
  std::printf("\nprofiler overhead, llama3 debugmodel, FSDP on 1 rank, batch 8 x seq 128, %d threads, "
              "%d timed steps x %d repeats (median)\n",
              threads, steps, repeats);
  std::printf("| run | s/step | ratio |\n|---|---|---|\n");
  for (int mode = 0; mode < 3; ++mode) {
    const double value = median(seconds[mode]);
    std::printf("| %s | %.4f | %.3f |\n", kNames[mode], value, value / base);
  }
  std::printf("\n| profiler off: direct cost | value |\n|---|---|\n");
  std::printf("| per range (open + close) | %.1f ns |\n", per_range * 1e9);
  std::printf("| ranges per step (upper bound) | %.0f |\n", ranges_per_step);
  std::printf("| modelled overhead per step | %.6f%% |\n", 100 * per_range * ranges_per_step / base);
  return 0;
}

}  // namespace titan_bench_profiler
