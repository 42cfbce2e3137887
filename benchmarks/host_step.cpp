// Host time per step: what Titan's host spends on one training step where
// the device costs nothing, and how many ATen ops it dispatches, for
// benchmarks/host_step.sh (which runs PyTorch eager beside it).
// - meta: the real step on meta tensors (the dry run of `titan plan`, one
//   rank), at the GPU benchmark's shapes: no values and no math, so what
//   is left is dispatch, autograd and Titan's own work;
// - cpu: a model so small (dim 64, 2 layers, batch 1 x seq 8, 1 thread)
//   that the host's work is most of the step.
// Seconds per step are the difference of two run lengths (start-up
// cancels), the median of `repeats`; ops per step are counted in runs of
// their own (a RecordFunction callback slows the ops it observes).
// Usage: titan_bench_host_step [steps (20)] [repeats (5)] [cases: a name
// prefix, "meta" or "cpu" (all)]; one JSON line per case on stdout.
#include <ATen/record_function.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "bench_training.hpp"
#include "titan/dry_run.hpp"
#include "titan/logging.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_host_step {

using titan::bench::median;
using titan::bench::seconds_since;

// Every ATen op dispatched, nested calls included (what PyTorch's profiler
// lists as `aten::` events), on every thread, while alive.
class AtenOpCounter {
 public:
  AtenOpCounter() {
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&AtenOpCounter::on_op).scopes({at::RecordScope::FUNCTION}));
  }
  ~AtenOpCounter() { at::removeCallback(handle_); }
  AtenOpCounter(const AtenOpCounter&) = delete;
  AtenOpCounter& operator=(const AtenOpCounter&) = delete;
  static std::map<std::string, int64_t> counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

 private:
  static std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
    if (std::string_view(fn.name()).rfind("aten::", 0) != 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_[fn.name()];
    return nullptr;
  }
  static inline std::mutex mutex_;
  static inline std::map<std::string, int64_t> counts_;
  at::CallbackHandle handle_;
};

struct Case {
  std::string name;
  std::function<void(int steps)> run;  // one whole run of that many steps
  int warmup;                          // the shorter run's length
  int steps;                           // the longer run's extra steps
};

void measure(const Case& c, int repeats) {
  std::vector<double> per_step;
  for (int r = 0; r < repeats; ++r) {
    auto timed = [&](int n) {
      auto start = std::chrono::steady_clock::now();
      c.run(n);
      return seconds_since(start);
    };
    const double short_run = timed(c.warmup);
    per_step.push_back((timed(c.warmup + c.steps) - short_run) / c.steps);
  }
  auto counted = [&](int n) {
    const auto before = AtenOpCounter::counts();
    {
      AtenOpCounter counter;
      c.run(n);
    }
    auto after = AtenOpCounter::counts();
    for (const auto& [name, count] : before) after[name] -= count;
    return after;
  };
  auto per_op = counted(c.warmup + c.steps);
  for (const auto& [name, count] : counted(c.warmup)) per_op[name] -= count;
  int64_t ops = 0;
  std::vector<std::pair<int64_t, std::string>> top;
  for (const auto& [name, count] : per_op) {
    ops += count;
    top.emplace_back(count, name);
  }
  std::sort(top.rbegin(), top.rend());
  top.resize(std::min<size_t>(top.size(), 12));
  std::string all, most;
  for (double s : per_step) all += (all.empty() ? "" : ", ") + std::to_string(s * 1e6);
  for (const auto& [count, name] : top) {
    most += (most.empty() ? "[\"" : ", [\"") + name + "\", " + std::to_string(static_cast<double>(count) / c.steps) + "]";
  }
  std::printf(
      "{\"case\": \"%s\", \"us_per_step\": %.1f, \"us_per_step_all\": [%s], \"aten_ops_per_step\": %.1f, "
      "\"top_ops\": [%s]}\n",
      c.name.c_str(), median(per_step) * 1e6, all.c_str(), static_cast<double>(ops) / c.steps, most.c_str());
  std::fflush(stdout);
}

// The GPU benchmark's recipe without its device: llama3 `flavor`, batch 8
// x seq 2048, fused AdamW, float32, no parallelism. A tokenizer path that
// does not exist leaves the flavor's own vocabulary (as `titan plan`
// does for a config planned away from its files); the debug model keeps
// the shipped tokenizer's.
std::string meta_run(const std::string& flavor) {
  const std::string tokenizer = flavor == "debugmodel" ? "assets/tokenizer/stories_bpe.json" : "/nonexistent";
  // Untied, as the Python reference's Llama is.
  return "model: {name: llama3, flavor: " + flavor + ", tokenizer_path: " + tokenizer + ", enable_weight_tying: false}\n"
         "optimizer: {name: AdamW, lr: 8.0e-4, implementation: fused}\n"
         "training: {local_batch_size: 8, seq_len: 2048, max_norm: 1.0}\n";
}

std::string cpu_run(int steps, const std::string& dump, bool fused_kernels) {
  return "job: {dump_folder: " + dump + "}\n"
         "model: {name: llama3, flavor: debugmodel, tokenizer_path: assets/tokenizer/stories_bpe.json, dim: 64, "
         "n_layers: 2, n_heads: 4}\n"
         "optimizer: {name: AdamW, lr: 8.0e-4, implementation: fused}\n"
         "lr_scheduler: {warmup_steps: 2}\n"
         "training: {local_batch_size: 1, seq_len: 8, max_norm: 1.0, threads: 1, steps: " + std::to_string(steps) +
         "}\n"
         "metrics: {log_freq: 10, peak_flops: 1.0e12}\n" +
         (fused_kernels ? "plugins: [{name: fused_kernels}]\n" : "");
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  titan::init_logging(0, "warn");
  const auto dump = std::filesystem::temp_directory_path() / "titan_bench_host_step";
  std::vector<Case> cases;
  for (const std::string flavor : {"debugmodel", "1B"}) {
    const auto config = titan::ConfigNode::parse(meta_run(flavor), "host_step.yaml");
    cases.push_back({"meta " + flavor, [config](int n) {
                       titan::DryRunOptions options;
                       options.steps = n;
                       titan::dry_run(config, options);
                     },
                     2, steps});
  }
  for (const bool fused : {false, true}) {
    // 10 steps a log step, in either run length, so both have the same share.
    cases.push_back({fused ? "cpu small fused_kernels" : "cpu small",
                     [&dump, fused](int n) { titan::bench::train_seconds(cpu_run(n, dump.string(), fused), dump); }, 10,
                     10 * steps});
  }
  const std::string only = argc > 3 ? argv[3] : "";
  for (const Case& c : cases) {
    if (c.name.rfind(only, 0) == 0) measure(c, repeats);
  }
  std::filesystem::remove_all(dump);
  return 0;
}

}  // namespace titan_bench_host_step
