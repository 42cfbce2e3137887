// Whole `titan train` runs timed in process, as the overhead benchmarks
// take them: one run's seconds (optionally counting its collectives), and
// seconds per step from two run lengths.
#pragma once
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "bench_timing.hpp"
#include "titan/comm_observer.hpp"
#include "titan/config.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"

namespace titan::bench {

// Counts collectives (added next to the run's own observers).
class CollectiveCounter : public titan::CommObserver {
 public:
  explicit CollectiveCounter(std::atomic<int64_t>& count) : count_(count) {}
  void on_enqueue(const titan::CollectiveEvent&) override { ++count_; }
  void on_complete(const titan::CollectiveEvent&, bool) override {}

 private:
  std::atomic<int64_t>& count_;
};

// The overhead benchmarks' run: the llama3 debug model, batch 8 x
// `seq_len`, AdamW, no logging or MFU measurement in the timed steps;
// `extra` adds YAML lines (plugins, profiling).
inline std::string debug_model_run(int steps, int threads, const std::string& dump, int seq_len,
                                   const std::string& extra = "") {
  return "job: {dump_folder: " + dump + "}\n"
         "model: {name: llama3, flavor: debugmodel, tokenizer_path: assets/tokenizer/stories_bpe.json}\n"
         "optimizer: {name: AdamW, lr: 8.0e-4}\n"
         "lr_scheduler: {warmup_steps: 2}\n"
         "training: {local_batch_size: 8, seq_len: " + std::to_string(seq_len) + ", steps: " + std::to_string(steps) +
         ", threads: " + std::to_string(threads) + "}\n"
         "metrics: {log_freq: 1000000, peak_flops: 1.0e12}\n" + extra;
}

// One run of `yaml`, its dump folder `dump` emptied first.
inline double train_seconds(const std::string& yaml, const std::filesystem::path& dump,
                            std::atomic<int64_t>* collectives = nullptr) {
  std::filesystem::remove_all(dump);
  auto spec = titan::resolve_run(titan::ConfigNode::parse(yaml, "bench.yaml"));
  if (collectives) spec.comm_observers.push_back(std::make_unique<CollectiveCounter>(*collectives));
  auto start = std::chrono::steady_clock::now();
  titan::train(spec);
  return seconds_since(start);
}

// Per step: the difference of two run lengths cancels build, init and data
// start-up. `yaml_for(steps)` is the run's config for that many steps.
inline double seconds_per_step(const std::function<std::string(int)>& yaml_for, const std::filesystem::path& dump,
                               int steps, int warmup) {
  return (train_seconds(yaml_for(warmup + steps), dump) - train_seconds(yaml_for(warmup), dump)) / steps;
}

}  // namespace titan::bench
