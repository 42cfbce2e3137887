// Step metrics: the log line, the metrics files, the sinks; throughput,
// TFLOPs, MFU, time and memory over each log window.
#include "step_metrics.hpp"

#include <ATen/ATen.h>
#include <torch/types.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/onednn_matmul.hpp"

namespace titan {

double measure_cpu_peak_flops() {
  const int64_t n = 512;
  // Constant inputs: the global RNG must not move (resume is bit-for-bit).
  auto a = torch::full({n, n}, 0.5), b = torch::full({n, n}, 0.25);
  // The fastest fp32 GEMM this LibTorch has here: oneDNN's (which the
  // fused_kernels plugin's CPU linears use) or ATen's own (MKL on x86,
  // which the ATen path uses, and which is faster on some AVX-512 parts).
  // Each is timed in short windows and the best window counts, so that a
  // thread pool waking up or a busy neighbour does not lower the peak and
  // push MFU past 100%.
  const std::function<at::Tensor()> gemms[] = {[&] { return matmul_nt(a, b); }, [&] { return at::mm(a, b); }};
  double best = 0;
  for (const auto& gemm : gemms) {
    gemm();  // warm-up
    for (int window = 0; window < 5; ++window) {
      int64_t iterations = 0;
      const auto start = std::chrono::steady_clock::now();
      double elapsed = 0;
      while (elapsed < 0.03) {
        gemm();
        ++iterations;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      best = std::max(best, 2.0 * n * n * n * iterations / elapsed);
    }
  }
  return best;
}

namespace {

// Dense datasheet TFLOP/s per GPU (no sparsity): tensor-core bf16/fp16, and
// plain fp32 (what fp32 matmuls get without TF32, which Titan leaves off).
struct GpuPeak {
  const char* name_part;
  double bf16, fp32;
};
constexpr GpuPeak kGpuPeaks[] = {
    {"H200", 989.5, 67.0},  {"H100 PCIe", 756.0, 51.0}, {"H100", 989.5, 67.0},
    {"A100", 312.0, 19.5},  {"B200", 2250.0, 75.0},
};

}  // namespace

double gpu_peak_flops(const std::string& name, c10::ScalarType compute_dtype) {
  for (const auto& peak : kGpuPeaks) {
    if (name.find(peak.name_part) == std::string::npos) continue;
    return 1e12 * (compute_dtype == c10::kFloat ? peak.fp32 : peak.bf16);
  }
  return 0;
}

std::string metrics_file_name(const MetricsConfig& config, int rank) {
  if (!config.enable_jsonl) return "";
  if (rank == 0) return "metrics.jsonl";
  return config.save_for_all_ranks ? "metrics.rank" + std::to_string(rank) + ".jsonl" : "";
}

StepMetrics::StepMetrics(MetricsSetup setup)
    : setup_(std::move(setup)), start_(std::chrono::steady_clock::now()), window_start_(start_) {
  const std::string name = metrics_file_name(setup_.config, setup_.rank);
  if (!name.empty()) {
    std::filesystem::create_directories(setup_.dump_folder);
    const std::string path = setup_.dump_folder + "/" + name;
    jsonl_ = std::make_unique<std::ofstream>(path, std::ios::app);
    if (!*jsonl_) throw Error("cannot write metrics file '" + path + "' (check job.dump_folder)");
  }
}

StepMetrics::~StepMetrics() {
  for (auto* sink : setup_.sinks) sink->flush();
}

void read_numbers(StepRecord& record) {
  if (!record.numbers.defined()) return;
  at::Tensor host = record.numbers.is_meta() ? at::zeros({3}, at::kDouble) : record.numbers.to(at::kCPU, at::kDouble);
  const double* values = host.data_ptr<double>();
  record.loss = values[0];
  record.max_loss = values[1];
  record.grad_norm = values[2];
  record.numbers = at::Tensor();
}

void StepMetrics::record(StepRecord& record) {
  window_tokens_ += record.tokens;
  window_data_loading_s_ += record.data_loading_s;
  ++window_steps_;
  if (progress_) progress_->step_done(record.step, record.tokens);
  const bool log_step = record.step % setup_.config.log_freq == 0;
  if (record.host_reads > 0 && !log_step) {
    window_host_reads_ += record.host_reads;
    std::string where;
    for (const auto& site : record.host_read_sites) where += "\n  " + site;
    spdlog::warn("step {}: {} host read(s) of tensor values on a step that does not log; on a GPU each waits for "
                 "the device:{}",
                 record.step, record.host_reads, where);
  }
  if (log_step) {
    if (progress_) progress_->clear();
    read_numbers(record);
    log(record);
  } else if (progress_) {
    progress_->show();
  }
}

void StepMetrics::record_validation(int64_t step, double loss, double tokens_per_sec, int64_t batches) {
  if (progress_) progress_->clear();
  spdlog::info("validation at step {}: loss {:8.4f} over {} batches, tokens/s {:9.0f}", step, loss, batches,
               tokens_per_sec);
  const std::map<std::string, double> values{{"validation_metrics/loss", loss},
                                             {"validation_metrics/tps", tokens_per_sec},
                                             {"validation_metrics/batches", double(batches)}};
  write(step, values);
}

void StepMetrics::write(int64_t step, const std::map<std::string, double>& values) {
  if (jsonl_) {
    nlohmann::json line = {{"step", step}};
    for (const auto& [key, value] : values) line[key] = value;
    *jsonl_ << line.dump() << "\n";
    jsonl_->flush();
  }
  for (auto* sink : setup_.sinks) sink->write(step, values);
}

void StepMetrics::flush_pending(const StepRecord& last) {
  if (progress_) progress_->clear();
  if (last.step > last_logged_step_ && window_tokens_ > 0) {
    StepRecord read = last;
    read_numbers(read);
    log(read);
  }
  for (auto* sink : setup_.sinks) sink->flush();
}

double StepMetrics::mfu_percent(double flops_per_sec) {
  if (setup_.peak_flops <= 0) return 0;
  const double mfu = 100.0 * flops_per_sec / setup_.peak_flops;
  if (mfu <= 100.0) return mfu;
  if (!warned_mfu_) {
    if (setup_.peak_source.empty()) {
      spdlog::warn("MFU measured {:.0f}% of the peak of {:.3g} FLOP/s; logged as 100%. The peak is too low: set "
                   "metrics.peak_flops to the device's real peak",
                   mfu, setup_.peak_flops);
    } else {  // a busy machine measures low, and the measurement is kept
      spdlog::warn("MFU measured {:.0f}% of the CPU's peak of {:.3g} FLOP/s ({}); logged as 100%. The peak is too "
                   "low (measured while the machine was busy?): delete that file to measure again on an idle "
                   "machine, or set metrics.peak_flops",
                   mfu, setup_.peak_flops, setup_.peak_source);
    }
    warned_mfu_ = true;
  }
  return 100.0;
}

void StepMetrics::log(const StepRecord& record) {
  const auto now = std::chrono::steady_clock::now();
  const double window_s = std::chrono::duration<double>(now - window_start_).count();
  const double elapsed_s = std::chrono::duration<double>(now - start_).count();
  const double steps = std::max<int64_t>(window_steps_, 1);
  const double tps = window_s > 0 ? window_tokens_ / window_s / double(setup_.devices_per_replica) : 0;
  const double flops_per_sec = tps * setup_.flops_per_token;
  const double mfu = mfu_percent(flops_per_sec);
  const double loading_pct = window_s > 0 ? 100.0 * window_data_loading_s_ / window_s : 0;
  const MemorySample memory = setup_.memory ? setup_.memory->take() : MemorySample{};
  spdlog::info("step {:>6}  loss {:8.4f}  grad_norm {:7.3f}  lr {:.3e}  tps {:9.0f}  tflops {:7.3f}  mfu {:5.2f}%  "
               "memory {:.2f} GiB ({:.1f}%)  data {:.1f}%{}",
               record.step, record.loss, record.grad_norm, record.lr, tps, flops_per_sec / 1e12, mfu,
               memory.max_reserved_gib, memory.max_reserved_pct, loading_pct,
               progress_ ? progress_->eta_suffix() : std::string());
  std::map<std::string, double> values{
      {"loss_metrics/global_avg_loss", record.loss},
      {"loss_metrics/global_max_loss", record.max_loss},
      {"grad_norm", record.grad_norm},
      {"lr", record.lr},
      {"throughput(tps)", tps},
      {"tflops", flops_per_sec / 1e12},
      {"mfu(%)", mfu},
      // This rank's replica's tokens since step 1 (TorchTitan's count; the
      // batch is the same every step, so a resume continues it).
      {"n_tokens_seen", double(record.step) * double(record.tokens)},
      {"time_metrics/end_to_end(s)", window_s / steps},
      {"time_metrics/data_loading(s)", window_data_loading_s_ / steps},
      {"time_metrics/data_loading(%)", loading_pct},
      {"time_metrics/elapsed(s)", elapsed_s},
      {"memory/max_active(GiB)", memory.max_active_gib},
      {"memory/max_active(%)", memory.max_active_pct},
      {"memory/max_reserved(GiB)", memory.max_reserved_gib},
      {"memory/max_reserved(%)", memory.max_reserved_pct},
      {"memory/num_alloc_retries", double(memory.alloc_retries)},
      {"memory/num_ooms", double(memory.ooms)},
      {"memory/state(GiB)", record.state_bytes / double(1ull << 30)},
  };
  values.insert(record.extra.begin(), record.extra.end());
  if (record.host_reads >= 0) {
    values["host_reads"] = double(window_host_reads_);  // the steps between log steps: 0 is the goal
    values["host_reads/log_step"] = double(record.host_reads);
  }
  write(record.step, values);
  window_host_reads_ = 0;
  window_tokens_ = 0;
  window_steps_ = 0;
  window_data_loading_s_ = 0;
  window_start_ = now;
  last_logged_step_ = record.step;
}

}  // namespace titan
