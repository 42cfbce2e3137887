// Per-step metrics: the log line, metrics.jsonl, and every MetricsSink;
// throughput and MFU over the steps since the last log.
#pragma once
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "titan/job_config.hpp"
#include "titan/metrics_sink.hpp"

namespace titan {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;  // tokens processed by this rank in the step
  int64_t state_bytes = 0;  // this rank's parameter + gradient + optimizer-state bytes
};

class StepMetrics {
 public:
  StepMetrics(const MetricsConfig& config, const std::string& dump_folder, double flops_per_token,
              double peak_flops, std::vector<MetricsSink*> sinks, const c10::Device& device);
  ~StepMetrics();
  void record(const StepRecord& record);  // logs when step % log_freq == 0 or force
  void flush_pending(const StepRecord& last);  // logs the last step if not logged yet
  double peak_flops() const { return peak_flops_; }

 private:
  void log(const StepRecord& record);
  MetricsConfig config_;
  double flops_per_token_;
  double peak_flops_;
  std::vector<MetricsSink*> sinks_;
  c10::Device device_;
  std::unique_ptr<std::ofstream> jsonl_;
  std::chrono::steady_clock::time_point start_, window_start_;
  int64_t window_tokens_ = 0;
  int64_t last_logged_step_ = 0;
};

// Dense float32 matmul FLOP/s of this CPU with the current thread count.
double measure_cpu_peak_flops();
// Datasheet bf16 dense FLOP/s from a GPU name, 0 if unknown.
double gpu_peak_flops(const std::string& device_name);
// Peak resident set size of this process.
int64_t max_resident_bytes();

}  // namespace titan
