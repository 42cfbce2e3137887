// Parallel runs against the single-process reference, as real jobs: the
// reference is `titan train` on the debug model (batch 8, seq 64, 10 steps);
// a parallel run is the same job under `titan launch` with other plugins,
// each data-parallel rank reading its share of the batch. Shared by the
// data-, tensor- and 2-D-parallel tests.
#pragma once
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <torch/csrc/jit/serialization/pickle.h>
#include <nlohmann/json.hpp>
#include <fstream>
#include <string>
#include <vector>

namespace titan::test {

// The debug model shrunk so each job takes seconds; still 4 heads, 4 kv
// heads and an FFN width of 256 to split over up to 4 ranks.
inline const std::string kSmallModel = " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4";

// configs/deepseek_v3_debugmodel*.yaml shrunk: dim 64, a dense block then a
// MoE block of 8 experts (top 3, 2 shared), MLA with 4 heads of 16 + 8 rope
// over a 32-wide kv latent.
inline const std::string kDeepseekSmall =
    " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4 --set model.kv_lora_rank=32"
    " --set model.qk_nope_head_dim=16 --set model.qk_rope_head_dim=8 --set model.v_head_dim=16"
    " --set model.inter_dim=128 --set model.moe_inter_dim=32 --set model.max_seq_len=64"
    // a load-balance step large enough that the expert bias changes routing
    " --set model.load_balance_coeff=0.01";

struct RunOutput {
  std::filesystem::path dump;  // the run's job.dump_folder
  std::vector<double> losses;
  std::vector<double> max_losses;  // loss_metrics/global_max_loss
  std::vector<double> grad_norms;
  std::vector<double> state_bytes;
  c10::Dict<std::string, at::Tensor> params;
};

// 300 short documents of 1 to 24 words as JSONL in a fresh folder `name`:
// a window of 64 tokens holds several, of uneven lengths.
inline std::filesystem::path write_uneven_documents(const std::string& name) {
  const std::filesystem::path path = temp_dir(name) / "documents.jsonl";
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far", "away", "from",
                         "home", "to", "find", "its", "friend", "who", "lived", "by", "river"};
  std::ofstream out(path);
  uint32_t state = 7;
  for (int document = 0; document < 300; ++document) {
    state = state * 1664525u + 1013904223u;
    const int length = 1 + static_cast<int>(state >> 27) % 24;
    std::string text;
    for (int i = 0; i < length; ++i) {
      state = state * 1664525u + 1013904223u;
      text += std::string(i ? " " : "") + words[(state >> 24) % 21];
    }
    out << "{\"text\": \"" << text << ".\"}\n";
  }
  return path;
}

inline std::string common_sets(const std::filesystem::path& dump) {
  return " --set training.steps=10 --set training.seq_len=64 --set training.threads=1"
         " --set lr_scheduler.warmup_steps=3 --set metrics.log_freq=1 --set job.dump_folder=" + dump.string() +
         " --set debug.save_final_model=" + (dump / "final.pt").string();
}

inline RunOutput read_run(const std::filesystem::path& dump) {
  RunOutput out;
  out.dump = dump;
  std::istringstream lines(read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (!record.contains("loss_metrics/global_avg_loss")) continue;  // a validation pass's line
    out.losses.push_back(record["loss_metrics/global_avg_loss"].get<double>());
    out.max_losses.push_back(record["loss_metrics/global_max_loss"].get<double>());
    out.grad_norms.push_back(record["grad_norm"].get<double>());
    out.state_bytes.push_back(record["memory/state(GiB)"].get<double>() * double(1ull << 30));
  }
  std::string bytes = read_file(dump / "final.pt");
  out.params = c10::impl::toTypedDict<std::string, at::Tensor>(
      torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict());
  return out;
}

inline RunOutput run_single(const std::string& name, const std::string& extra = "") {
  auto dump = temp_dir(name);
  auto result = run_command("timeout 300 " + titan_binary() + " train " + source_dir() +
                            "/configs/llama3_debugmodel.yaml --set training.local_batch_size=8" + common_sets(dump) +
                            extra);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return read_run(dump);
}

// `plugins` is the YAML list's content; `dp` the data-parallel degree it
// makes (the batch of 8 is split over it; default: every rank).
inline RunOutput run_ranks(const std::string& name, int ranks, int port, const std::string& plugins,
                           const std::string& extra = "", int dp = 0) {
  auto dump = temp_dir(name);
  auto result = run_command("timeout 300 " + titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) +
                            " --master-port " + std::to_string(port) + " --grace-period-s 5 -- " + titan_binary() +
                            " train " + source_dir() + "/configs/llama3_debugmodel.yaml --set training.local_batch_size=" +
                            std::to_string(8 / (dp > 0 ? dp : ranks)) + " --set 'plugins=[" + plugins + "]'" +
                            common_sets(dump) + extra);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return read_run(dump);
}

// `config` (a path under configs/) on `ranks` processes under `titan
// launch` with the common settings and `sets`; every line of `logged` must
// appear in the job's output.
inline RunOutput launch_config(const std::string& name, int ranks, int port, const std::string& config,
                               const std::string& sets, const std::vector<std::string>& logged = {}) {
  auto dump = temp_dir(name);
  auto result = run_command("timeout 300 " + titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) +
                            " --master-port " + std::to_string(port) + " --grace-period-s 5 -- " + titan_binary() +
                            " train " + source_dir() + "/configs/" + config + common_sets(dump) + sets);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  for (const auto& line : logged) CHECK_MESSAGE(result.output.find(line) != std::string::npos, line);
  return read_run(dump);
}

// A 6-step job with a checkpoint every 3 steps (`command`, writing to
// `dump`) run, "crashed" after its step-3 checkpoint (step-6 and the
// metrics removed) and run again: the resumed run's steps 4-6.
inline RunOutput resumed_after_step_3(const std::string& command, const std::filesystem::path& dump) {
  auto first = run_command(command);
  REQUIRE_MESSAGE(first.exit_code == 0, first.output);
  std::filesystem::remove_all(dump / "checkpoint" / "step-6");
  std::filesystem::remove(dump / "metrics.jsonl");
  auto second = run_command(command);
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  CHECK(has(second.output, "resumed from checkpoint at step 3"));
  return read_run(dump);
}


// Losses and grad norms per step relative to the reference, parameters in
// the L2 sense per tensor (an element-wise max is dominated by AdamW steps on
// near-zero gradients, whose sign flips on 1e-7 noise). Prints the maxima.
inline void check_equivalent(const RunOutput& parallel, const RunOutput& reference, double tolerance) {
  REQUIRE(parallel.losses.size() == 10);
  REQUIRE(reference.losses.size() == 10);
  double worst_loss = 0, worst_norm = 0, worst_param = 0;
  std::string worst_name;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    worst_loss = std::max(worst_loss, relative(parallel.losses[i], reference.losses[i]));
    worst_norm = std::max(worst_norm, relative(parallel.grad_norms[i], reference.grad_norms[i]));
  }
  REQUIRE(parallel.params.size() == reference.params.size());
  for (const auto& item : reference.params) {
    at::Tensor mine = parallel.params.at(item.key());
    REQUIRE(mine.sizes() == item.value().sizes());
    // Relative in the L2 sense, per tensor: ||mine - ref|| / ||ref||.
    double difference = (mine - item.value()).norm().item<double>() / std::max(item.value().norm().item<double>(), 1e-12);
    if (difference > worst_param) {
      worst_param = difference;
      worst_name = item.key();
    }
  }
  MESSAGE("max relative difference: loss " << worst_loss << ", grad norm " << worst_norm << ", parameters "
                                           << worst_param << " (" << worst_name << ")");
  CHECK(worst_loss <= tolerance);
  CHECK(worst_norm <= tolerance);
  CHECK(worst_param <= tolerance);
  CHECK(reference.losses.back() < reference.losses.front());  // it trained
}

}  // namespace titan::test
