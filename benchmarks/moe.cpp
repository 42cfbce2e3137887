// Mixture-of-Experts: expert parallelism at EP1 / EP2 / EP4 on the qwen3 MoE
// debug model (configs/qwen3_debugmodel_moe.yaml's shapes, FSDP dp_shard =
// ep, one global batch), each rank's tokens/s, all-to-all bytes and peak
// memory, with ratios to EP1; then the routed experts' grouped GEMM
// (run_experts_grouped_mm) against the loop (run_experts_loop), forward +
// backward, on the same shapes and on the flavor's own, and whether the two
// agree. Measured in one run: this binary launches itself under `titan
// launch` once per degree (real Gloo ranks on CPU) and runs `titan::train`
// in each rank.
// Usage (from the repository root): titan_bench_moe [steps (10)] [repeats (2)]
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "titan/comm_observer.hpp"
#include "titan/config.hpp"
#include "titan/logging.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/moe.hpp"
#include "titan/peak_memory.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"
#include "titan/world.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_moe {

namespace fs = std::filesystem;

constexpr int kWarmupSteps = 2;  // left out of every figure
constexpr int kFirstPort = 29861;
constexpr int kGlobalBatch = 8;
constexpr int kSeq = 128;
const std::vector<int> kDegrees = {1, 2, 4};

// configs/qwen3_debugmodel_moe.yaml: dim 64, 2 blocks of 8 experts (top 2,
// width 64), global batch 8 x 128, split over the ep ranks (FSDP's
// dp_shard = ep: expert parallelism borrows its ranks from it).
std::string run_yaml(int ep, int steps, const fs::path& folder) {
  return "job: {dump_folder: '" + folder.string() + "'}\n" +
         "model: {name: qwen3, flavor: debugmodel_moe, tokenizer_path: assets/tokenizer/stories_bpe.json, dim: 64,"
         " n_layers: 2, n_heads: 4, n_kv_heads: 2, head_dim: 16, num_experts: 8, top_k: 2, moe_hidden_dim: 64,"
         " max_seq_len: 256, load_balance_coeff: 1.0e-3}\n" +
         "optimizer: {name: AdamW, lr: 8.0e-4}\n" +
         "lr_scheduler: {warmup_steps: 2}\n" +
         "training: {local_batch_size: " + std::to_string(kGlobalBatch / ep) + ", seq_len: " + std::to_string(kSeq) +
         ", steps: " + std::to_string(steps) + ", threads: 1, dataset: stories, seed: 0}\n" +
         "metrics: {log_freq: 1}\n" +
         "plugins:\n" +
         "  - {name: fsdp, dp_shard: " + std::to_string(ep) + "}\n" +
         "  - {name: expert_parallel, expert_parallel_degree: " + std::to_string(ep) + "}\n";
}

// The bytes this rank sends by all-to-all (the per-expert counts and the
// token rows, dispatch and combine, forward and backward).
class AllToAllCounter : public titan::CommObserver {
 public:
  void on_enqueue(const titan::CollectiveEvent& event) override {
    if (event.op != "all_to_all") return;
    bytes_ += event.bytes;
    ++calls_;
  }
  void on_complete(const titan::CollectiveEvent&, bool) override {}
  std::pair<int64_t, int64_t> take() { return {bytes_.exchange(0), calls_.exchange(0)}; }

 private:
  std::atomic<int64_t> bytes_{0}, calls_{0};
};

// After every step (log_freq 1): the step's all-to-all traffic and the most
// LibTorch's CPU allocator held during it above what stays live between
// steps (parameters, AdamW moments), and that rest.
class StepSink : public titan::MetricsSink {
 public:
  StepSink(titan::CpuMemoryTracker& tracker, AllToAllCounter& counter, int rank)
      : tracker_(tracker), counter_(counter), rank_(rank) {}
  void write(int64_t step, const std::map<std::string, double>& metrics) override {
    const int64_t peak = tracker_.take_peak();
    auto [bytes, calls] = counter_.take();
    std::printf("RESULT %d %ld %.6f %ld %ld %ld %ld %.17g\n", rank_, static_cast<long>(step),
                metrics.at("time_metrics/end_to_end(s)"), static_cast<long>(bytes), static_cast<long>(calls),
                static_cast<long>(peak - rest_), static_cast<long>(tracker_.live()),
                metrics.at("loss_metrics/global_avg_loss"));
    std::fflush(stdout);
    rest_ = tracker_.live();
  }

 private:
  titan::CpuMemoryTracker& tracker_;
  AllToAllCounter& counter_;
  int rank_;
  int64_t rest_ = 0;  // the first window also holds the model's construction
};

int worker(int ep, int steps, const fs::path& folder) {
  titan::World world = titan::detect_world();
  titan::init_logging(world.rank, "warn");
  auto config = titan::ConfigNode::parse(run_yaml(ep, steps, folder), "bench_moe.yaml");
  titan::RunSpec spec = titan::resolve_run(config, world.rank, world.world_size);
  titan::CpuMemoryTracker tracker;
  auto counter = std::make_unique<AllToAllCounter>();
  AllToAllCounter& count = *counter;
  spec.comm_observers.push_back(std::move(counter));
  spec.metrics_sinks.push_back(std::make_unique<StepSink>(tracker, count, world.rank));
  try {
    titan::train(spec, world);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d, ep %d: %s\n", world.rank, ep, error.what());
    return 1;
  }
  return 0;
}

struct StepResult {
  double seconds = 0, above_rest = 0, rest = 0, loss = 0;
  int64_t a2a_bytes = 0, a2a_calls = 0;
};

std::string run(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  *status = pclose(pipe);
  return output;
}

// One degree's runs (repeats), [rank][step] each.
struct Row {
  int ep = 1;
  std::vector<std::map<int, std::map<int64_t, StepResult>>> runs;

  template <typename Pick>
  std::vector<double> steady(int rank, Pick pick) const {
    std::vector<double> values;
    for (const auto& run : runs) {
      for (const auto& [step, result] : run.at(rank)) {
        if (step > kWarmupSteps) values.push_back(pick(result));
      }
    }
    return values;
  }
  // Rank 0's median step (the trainer's clock; ranks step together).
  double step_seconds() const { return titan::bench::median(steady(0, [](const StepResult& r) { return r.seconds; })); }
  double tokens_per_second() const { return kGlobalBatch * kSeq / step_seconds(); }
  // The largest over ranks of a rank's mean per steady step.
  double worst_rank_mean(double (*pick)(const StepResult&)) const {
    double most = 0;
    for (int rank = 0; rank < ep; ++rank) {
      auto values = steady(rank, pick);
      double sum = 0;
      for (double v : values) sum += v;
      most = std::max(most, sum / static_cast<double>(values.size()));
    }
    return most;
  }
  double most(double (*pick)(const StepResult&)) const {
    double out = 0;
    for (int rank = 0; rank < ep; ++rank) {
      for (double v : steady(rank, pick)) out = std::max(out, v);
    }
    return out;
  }
  double last_loss() const { return runs.front().at(0).rbegin()->second.loss; }
};

bool measure(const fs::path& self, const fs::path& titan, int ep, int steps, const fs::path& folder, Row& row) {
  fs::remove_all(folder);
  fs::create_directories(folder);
  const std::string command = "TITAN_BENCH_MOE_WORKER=" + std::to_string(ep) + " TITAN_BENCH_MOE_FOLDER='" +
                              folder.string() + "' " + titan.string() + " launch --nproc-per-node " +
                              std::to_string(ep) + " --master-port " + std::to_string(kFirstPort + 2 * ep) +
                              " --grace-period-s 5 -- " + self.string() + " " + std::to_string(steps) + " 2>&1";
  int status = 0;
  std::string output = run(command, &status);
  std::map<int, std::map<int64_t, StepResult>> results;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("RESULT ");
    if (at == std::string::npos) continue;
    std::istringstream fields(line.substr(at + 7));
    int rank;
    long step;
    StepResult r;
    fields >> rank >> step >> r.seconds >> r.a2a_bytes >> r.a2a_calls >> r.above_rest >> r.rest >> r.loss;
    results[rank][step] = r;
  }
  bool ok = status == 0 && static_cast<int>(results.size()) == ep;
  for (const auto& [rank, by_step] : results) ok = ok && static_cast<int>(by_step.size()) == steps;
  if (!ok) {
    std::fprintf(stderr, "ep %d failed; the launch's output ends:\n%s\n", ep,
                 output.substr(output.size() > 4000 ? output.size() - 4000 : 0).c_str());
    return false;
  }
  row.runs.push_back(std::move(results));
  return true;
}

// The experts' two backends on one shape: forward + backward seconds
// (median, alternated) and the largest difference of outputs and gradients.
struct ExpertsRow {
  std::string shape;
  int64_t experts, dim, hidden, rows;
  double loop_s = 0, grouped_s = 0, loop_forward_s = 0, grouped_forward_s = 0;
  double output_diff = 0, grad_diff = 0, output_scale = 0;
};

ExpertsRow time_experts(const std::string& shape, int64_t experts, int64_t dim, int64_t hidden, int64_t tokens,
                        int64_t top_k, int repeats) {
  ExpertsRow row{shape, experts, dim, hidden, tokens * top_k};
  at::manual_seed(0);
  auto weight = [&](int64_t out, int64_t in) {
    return (at::randn({experts, out, in}) / std::sqrt(static_cast<double>(in))).requires_grad_(true);
  };
  at::Tensor w1 = weight(hidden, dim), w2 = weight(dim, hidden), w3 = weight(hidden, dim);
  at::Tensor tokens_in = at::randn({row.rows, dim});
  // Routing-like group sizes: every (token, slot) row to a random expert.
  at::Tensor chosen = at::randint(experts, {row.rows}, at::kLong);
  at::Tensor counts = at::bincount(chosen, {}, experts);
  std::vector<int64_t> per_expert(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + experts);
  at::Tensor upstream = at::randn({row.rows, dim});
  auto pass = [&](bool grouped, std::vector<at::Tensor>* grads, bool backward = true) {
    at::Tensor x = tokens_in.clone().requires_grad_(true);
    at::Tensor out = grouped ? titan::run_experts_grouped_mm(w1, w2, w3, x, per_expert, 1)
                             : titan::run_experts_loop(w1, w2, w3, x, per_expert);
    if (!backward) return;
    out.backward(upstream);
    if (grads) *grads = {out.detach(), x.grad(), w1.grad().clone(), w2.grad().clone(), w3.grad().clone()};
    for (at::Tensor* w : {&w1, &w2, &w3}) w->mutable_grad().reset();
  };
  std::vector<at::Tensor> loop, grouped;
  pass(false, &loop);
  pass(true, &grouped);
  row.output_diff = (loop[0] - grouped[0]).abs().max().item<double>();
  row.output_scale = loop[0].abs().max().item<double>();
  for (size_t i = 1; i < loop.size(); ++i) {
    row.grad_diff = std::max(row.grad_diff, (loop[i] - grouped[i]).abs().max().item<double>());
  }
  std::vector<double> loop_s, grouped_s, loop_forward_s, grouped_forward_s;
  for (int i = 0; i < repeats; ++i) {
    for (bool use_grouped : {false, true}) {
      auto start = std::chrono::steady_clock::now();
      pass(use_grouped, nullptr);
      (use_grouped ? grouped_s : loop_s).push_back(titan::bench::seconds_since(start));
      start = std::chrono::steady_clock::now();
      pass(use_grouped, nullptr, /*backward=*/false);
      (use_grouped ? grouped_forward_s : loop_forward_s).push_back(titan::bench::seconds_since(start));
    }
  }
  row.loop_s = titan::bench::median(loop_s);
  row.grouped_s = titan::bench::median(grouped_s);
  row.loop_forward_s = titan::bench::median(loop_forward_s);
  row.grouped_forward_s = titan::bench::median(grouped_forward_s);
  return row;
}

double mib(double bytes) { return bytes / 1048576.0; }

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  const char* worker_ep = std::getenv("TITAN_BENCH_MOE_WORKER");
  const char* worker_folder = std::getenv("TITAN_BENCH_MOE_FOLDER");
  if (worker_ep && worker_folder) return worker(std::atoi(worker_ep), steps, worker_folder);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 2;
  if (steps <= kWarmupSteps + 1 || repeats < 1) {
    std::fprintf(stderr, "usage: titan_bench_moe [steps > %d (10)] [repeats (2)]\n", kWarmupSteps + 1);
    return 2;
  }
  if (!fs::exists("assets/tokenizer/stories_bpe.json")) {
    std::fprintf(stderr, "titan_bench_moe: run it from the repository root (it reads assets/tokenizer)\n");
    return 2;
  }
  titan::init_logging(0, "warn");
  const fs::path self = fs::canonical("/proc/self/exe");
  const fs::path titan = self.parent_path() / "titan";
  const fs::path root = fs::temp_directory_path() / "titan_bench_moe";

  // The degrees alternate, so that load from elsewhere falls on all of them.
  std::vector<Row> rows(kDegrees.size());
  for (int repeat = 0; repeat < repeats; ++repeat) {
    for (size_t i = 0; i < kDegrees.size(); ++i) {
      rows[i].ep = kDegrees[i];
      if (!measure(self, titan, kDegrees[i], steps, root / ("ep" + std::to_string(kDegrees[i])), rows[i])) return 1;
      std::fprintf(stderr, "ep %d: run %d of %d done\n", kDegrees[i], repeat + 1, repeats);
    }
  }

  const Row& ep1 = rows.front();
  auto bytes = [](const StepResult& r) { return static_cast<double>(r.a2a_bytes); };
  auto calls = [](const StepResult& r) { return static_cast<double>(r.a2a_calls); };
  auto rest = [](const StepResult& r) { return r.rest; };
  auto peak = [](const StepResult& r) { return r.rest + r.above_rest; };
  std::printf("\nexpert parallelism: qwen3 debugmodel_moe as configs/qwen3_debugmodel_moe.yaml (dim 64, 2 blocks of 8 "
              "experts, top 2, width 64, vocab 2048), FSDP dp_shard = ep, global batch %d x seq %d, AdamW, fp32, 1 "
              "thread per rank, Gloo; %d runs of %d steps, the first %d of each left out\n",
              kGlobalBatch, kSeq, repeats, steps, kWarmupSteps);
  std::printf("tokens/s: the job's tokens per median step (rank 0's clock). all-to-all: bytes a rank sends per step "
              "(counts and rows, dispatch and combine, forward and backward; the largest rank's mean). peak: the most "
              "LibTorch's CPU allocator held on a rank during a step (bytes requested, the largest rank); rest: "
              "what stays live between steps (parameters, AdamW moments)\n");
  std::printf("| ep | ranks | s/step | tokens/s | / EP1 | per rank / EP1 | all-to-all KiB/step/rank | all-to-alls/step "
              "| peak MiB/rank | / EP1 | rest MiB/rank | / EP1 | last loss |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    const double tps = row.tokens_per_second();
    std::printf("| %d | %d | %.4f | %.0f | %.2f | %.2f | %.1f | %.0f | %.2f | %.3f | %.2f | %.3f | %.6f |\n", row.ep, row.ep,
                row.step_seconds(), tps, tps / ep1.tokens_per_second(), tps / row.ep / ep1.tokens_per_second(),
                row.worst_rank_mean(bytes) / 1024.0, row.worst_rank_mean(calls), mib(row.most(peak)),
                row.most(peak) / ep1.most(peak), mib(row.most(rest)), row.most(rest) / ep1.most(rest), row.last_loss());
  }
  double worst = 0;
  for (const Row& row : rows) {
    for (const auto& run : row.runs) {
      const double loss = run.at(0).rbegin()->second.loss;
      worst = std::max(worst, std::abs(loss - ep1.last_loss()) / std::abs(ep1.last_loss()));
    }
  }
  std::printf("same training: every run's last loss is within %.1e (relative) of EP1's\n", worst);

  // The experts alone, in this process, one thread.
  at::set_num_threads(1);
  std::vector<ExpertsRow> experts = {
      time_experts("config (8 x 64 x 64, top 2)", 8, 64, 64, kGlobalBatch * kSeq, 2, 20),
      time_experts("flavor debugmodel_moe (64 x 256 x 768, top 8)", 64, 256, 768, kGlobalBatch * kSeq, 8, 5),
  };
  std::printf("\nrouted experts, forward + backward of one MoE layer's experts on a batch's %d tokens, rows to "
              "random experts, fp32, 1 thread, median (alternated):\n",
              kGlobalBatch * kSeq);
  std::printf("| shape (experts x dim x width) | rows | fwd+bwd loop s | grouped_mm s | grouped / loop | forward "
              "loop s | grouped_mm s | grouped / loop | max |out diff| (max |out|) | max |grad diff| |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const ExpertsRow& row : experts) {
    std::printf("| %s | %ld | %.4f | %.4f | %.2f | %.4f | %.4f | %.2f | %.1e (%.2f) | %.1e |\n", row.shape.c_str(),
                static_cast<long>(row.rows), row.loop_s, row.grouped_s, row.grouped_s / row.loop_s,
                row.loop_forward_s, row.grouped_forward_s, row.grouped_forward_s / row.loop_forward_s,
                row.output_diff, row.output_scale, row.grad_diff);
  }
  return 0;
}

}  // namespace titan_bench_moe
