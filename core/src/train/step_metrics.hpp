// Per-step metrics as TorchTitan logs them: the log line, metrics.jsonl, and
// every MetricsSink; throughput, TFLOPs and MFU over the steps since the
// last log. The keys are docs/metrics.md's.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory_metrics.hpp"
#include "titan/job_config.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/progress.hpp"

namespace titan {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;      // the mean over the job's data-parallel ranks
  double max_loss = 0;  // the largest data-parallel rank's
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;  // tokens processed by this rank's data-parallel replica in the step
  double data_loading_s = 0;  // seconds this rank waited for the step's batches
  int64_t state_bytes = 0;  // this rank's parameter + gradient + optimizer-state bytes
  std::map<std::string, double> extra;  // model metrics of the step (MoE loads: moe/<router>/imbalance, ...)
  // debug.count_host_reads: the step's reads of tensor values by the host
  // (-1: not counted) and where the first few were.
  int64_t host_reads = -1;
  // [loss, max_loss, grad_norm] (fp64, on the device) until a log step
  // reads them into the three fields above (read_numbers): the step itself
  // never waits for the device.
  at::Tensor numbers;
  std::vector<std::string> host_read_sites;
};

// Fills loss, max_loss and grad_norm from `numbers` (one host read) and
// drops it; nothing when already read.
void read_numbers(StepRecord& record);

// What StepMetrics needs to know of the run.
struct MetricsSetup {
  MetricsConfig config;
  std::string dump_folder;
  int rank = 0;
  double flops_per_token = 0;  // the whole model's, forward and backward
  double peak_flops = 0;       // per device; 0: unknown, MFU is logged as 0
  std::string peak_source;     // a measured CPU peak: when, and where it is kept
  // Devices that share one data-parallel replica's tokens (tp x cp x pp):
  // throughput and MFU are per device, as TorchTitan's.
  int64_t devices_per_replica = 1;
  std::vector<MetricsSink*> sinks;  // this rank's (a sink decides whether a rank writes)
  MemoryMetrics* memory = nullptr;
};

class StepMetrics {
 public:
  explicit StepMetrics(MetricsSetup setup);
  ~StepMetrics();
  void record(StepRecord& record);  // logs (reading its numbers) when step % log_freq == 0
  // A validation pass at `step`: logged, and a line of metrics.jsonl and the
  // sinks with validation_metrics/loss, /tps and /batches.
  void record_validation(int64_t step, double loss, double tokens_per_sec, int64_t batches);
  // Progress and ETA between and in the log lines (metrics.progress).
  void set_progress(std::unique_ptr<Progress> progress) { progress_ = std::move(progress); }
  // Logs `last` unless it was logged (a run that ends between two log_freq
  // steps still reports its last one), then flushes the sinks.
  void flush_pending(const StepRecord& last);

 private:
  void log(const StepRecord& record);
  // One line of this rank's metrics file and every sink's write.
  void write(int64_t step, const std::map<std::string, double>& values);
  // The step's MFU in %, capped at 100 with a warning: more means the peak is wrong.
  double mfu_percent(double flops_per_sec);
  MetricsSetup setup_;
  std::unique_ptr<std::ofstream> jsonl_;
  std::chrono::steady_clock::time_point start_, window_start_;
  int64_t window_tokens_ = 0, window_steps_ = 0;
  double window_data_loading_s_ = 0;
  int64_t last_logged_step_ = 0;
  int64_t window_host_reads_ = 0;  // debug.count_host_reads: in the window's steps before its log step
  bool warned_mfu_ = false;
  std::unique_ptr<Progress> progress_;
};

// The metrics file a rank writes under dump_folder: rank 0's is
// metrics.jsonl; with metrics.save_for_all_ranks rank r's is
// metrics.rank<r>.jsonl; "" when this rank writes none.
std::string metrics_file_name(const MetricsConfig& config, int rank);

// Dense float32 matmul FLOP/s of this CPU with the current thread count.
double measure_cpu_peak_flops();
// The same, measured once per machine (CPU model, cores, threads, LibTorch)
// and kept in titan_cache_dir()/cpu_peak_flops.json (cpu_peak_cache.cpp);
// `source` says when and where, for the warning of an MFU above 100%.
struct CpuPeak {
  double flops = 0;
  std::string source;
};
CpuPeak cpu_peak_flops();
// Whether a kept peak is measured again: no other task runs now
// (`busy_now` == 0), and some did when it was measured (or it is not known).
bool cpu_peak_measure_again(std::optional<int> busy_then, int busy_now);
// TITAN_CACHE_DIR, else $XDG_CACHE_HOME/titan, else ~/.cache/titan.
std::filesystem::path titan_cache_dir();
// Datasheet dense FLOP/s of a GPU from its name (H100 SXM/PCIe, H200, A100,
// B200) for the dtype its matmuls run in (kFloat: plain fp32, TF32 being
// off; otherwise tensor-core bf16); 0 when unknown (MFU is then logged as 0).
double gpu_peak_flops(const std::string& device_name, c10::ScalarType compute_dtype);

}  // namespace titan
