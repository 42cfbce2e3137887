// Step metrics: log line, metrics.jsonl, sinks, throughput and MFU.
#include "step_metrics.hpp"

#include <sys/resource.h>
#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

double measure_cpu_peak_flops() {
  const int64_t n = 512;
  // Constant inputs: the global RNG must not move (resume is bit-for-bit).
  auto a = torch::full({n, n}, 0.5), b = torch::full({n, n}, 0.25);
  auto c = torch::mm(a, b);  // warm-up
  int64_t iterations = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < 0.25) {
    c = torch::mm(a, b);
    ++iterations;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return 2.0 * n * n * n * iterations / elapsed;
}

double gpu_peak_flops(const std::string& name) {
  if (name.find("H200") != std::string::npos) return 989.5e12;
  if (name.find("H100") != std::string::npos) return name.find("PCIe") != std::string::npos ? 756e12 : 989.5e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  if (name.find("B200") != std::string::npos) return 2250e12;
  return 0;
}

int64_t max_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

StepMetrics::StepMetrics(const MetricsConfig& config, const std::string& dump_folder, double flops_per_token,
                         double peak_flops, std::vector<MetricsSink*> sinks, const c10::Device& device)
    : config_(config),
      flops_per_token_(flops_per_token),
      peak_flops_(peak_flops),
      sinks_(std::move(sinks)),
      device_(device),
      start_(std::chrono::steady_clock::now()),
      window_start_(start_) {
  if (config.enable_jsonl) {
    std::filesystem::create_directories(dump_folder);
    std::string path = dump_folder + "/metrics.jsonl";
    jsonl_ = std::make_unique<std::ofstream>(path, std::ios::app);
    if (!*jsonl_) throw Error("cannot write metrics file '" + path + "' (check job.dump_folder)");
  }
}

StepMetrics::~StepMetrics() {
  for (auto* sink : sinks_) sink->flush();
}

void StepMetrics::record(const StepRecord& record) {
  window_tokens_ += record.tokens;
  if (progress_) progress_->step_done(record.step, record.tokens);
  if (record.step % config_.log_freq == 0) {
    if (progress_) progress_->clear();
    log(record);
  } else if (progress_) {
    progress_->show();
  }
}

void StepMetrics::record_validation(int64_t step, double loss, double tokens_per_sec, int64_t batches) {
  if (progress_) progress_->clear();
  spdlog::info("validation at step {}: loss {:8.4f} over {} batches, tokens/s {:9.0f}", step, loss, batches,
               tokens_per_sec);
  const std::map<std::string, double> values{{"validation_loss", loss},
                                             {"validation_tokens_per_sec", tokens_per_sec},
                                             {"validation_batches", double(batches)}};
  write(step, values);
}

void StepMetrics::write(int64_t step, const std::map<std::string, double>& values) {
  if (jsonl_) {
    nlohmann::json line = {{"step", step}};
    for (const auto& [key, value] : values) line[key] = value;
    *jsonl_ << line.dump() << "\n";
    jsonl_->flush();
  }
  for (auto* sink : sinks_) sink->write(step, values);
}

void StepMetrics::flush_pending(const StepRecord& last) {
  if (progress_) progress_->clear();
  if (last.step > last_logged_step_ && window_tokens_ > 0) log(last);
  for (auto* sink : sinks_) sink->flush();
}

void StepMetrics::log(const StepRecord& record) {
  auto now = std::chrono::steady_clock::now();
  double window_s = std::chrono::duration<double>(now - window_start_).count();
  double elapsed_s = std::chrono::duration<double>(now - start_).count();
  double tokens_per_sec = window_s > 0 ? window_tokens_ / window_s : 0;
  double mfu = peak_flops_ > 0 ? tokens_per_sec * flops_per_token_ / peak_flops_ : 0;
  int64_t memory = device_.is_cuda() ? compat::device_peak_memory(device_) : max_resident_bytes();
  spdlog::info("step {:>6}  loss {:8.4f}  grad_norm {:7.3f}  lr {:.3e}  tokens/s {:9.0f}  mfu {:5.2f}%  memory {:.2f} GiB{}",
               record.step, record.loss, record.grad_norm, record.lr, tokens_per_sec, 100 * mfu,
               memory / double(1ull << 30), progress_ ? progress_->eta_suffix() : std::string());
  std::map<std::string, double> values{{"loss", record.loss},
                                       {"grad_norm", record.grad_norm},
                                       {"lr", record.lr},
                                       {"tokens_per_sec", tokens_per_sec},
                                       {"mfu", mfu},
                                       {"memory_bytes", double(memory)},
                                       {"state_bytes", double(record.state_bytes)},
                                       {"elapsed_s", elapsed_s}};
  values.insert(record.extra.begin(), record.extra.end());
  write(record.step, values);
  window_tokens_ = 0;
  window_start_ = now;
  last_logged_step_ = record.step;
}

}  // namespace titan
