// Per-step metrics: the log line, metrics.jsonl, and every MetricsSink;
// throughput and MFU over the steps since the last log.
#pragma once
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/job_config.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/progress.hpp"

namespace titan {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;  // tokens processed by this rank in the step
  int64_t state_bytes = 0;  // this rank's parameter + gradient + optimizer-state bytes
  std::map<std::string, double> extra;  // model metrics of the step (MoE loads: moe/<router>/imbalance, ...)
};

class StepMetrics {
 public:
  // `peak_flops` 0: the peak is unknown and MFU is logged as 0.
  StepMetrics(const MetricsConfig& config, const std::string& dump_folder, double flops_per_token,
              double peak_flops, std::vector<MetricsSink*> sinks, const c10::Device& device);
  ~StepMetrics();
  void record(const StepRecord& record);  // logs when step % log_freq == 0
  // A validation pass at `step`: logged, and a line of metrics.jsonl and the
  // sinks with validation_loss and validation_tokens_per_sec.
  void record_validation(int64_t step, double loss, double tokens_per_sec, int64_t batches);
  // Progress and ETA between and in the log lines (metrics.progress).
  void set_progress(std::unique_ptr<Progress> progress) { progress_ = std::move(progress); }
  // Logs `last` unless it was logged (a run that ends between two log_freq
  // steps still reports its last one), then flushes the sinks.
  void flush_pending(const StepRecord& last);

 private:
  void log(const StepRecord& record);
  // One line of metrics.jsonl and every sink's write.
  void write(int64_t step, const std::map<std::string, double>& values);
  MetricsConfig config_;
  double flops_per_token_;
  double peak_flops_;
  std::vector<MetricsSink*> sinks_;
  c10::Device device_;
  std::unique_ptr<std::ofstream> jsonl_;
  std::chrono::steady_clock::time_point start_, window_start_;
  int64_t window_tokens_ = 0;
  int64_t last_logged_step_ = 0;
  std::unique_ptr<Progress> progress_;
};

// Dense float32 matmul FLOP/s of this CPU with the current thread count.
double measure_cpu_peak_flops();
// Datasheet dense bf16 FLOP/s of a GPU from its name (H100 SXM/PCIe, H200,
// A100, B200); 0 when unknown (MFU is then logged as 0).
double gpu_peak_flops(const std::string& device_name);
// Peak resident set size of this process.
int64_t max_resident_bytes();

}  // namespace titan
