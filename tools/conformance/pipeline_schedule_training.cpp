// Each schedule's job runs in conformance workers that call the trainer
// (plan_run + train, as `titan train` does), so the stages are cut, placed
// and driven by the same code as a real run. One process trains the same job
// without the pipeline first: the reference every schedule's rank 0 compares
// its metrics.jsonl and its gathered final parameters with.
#include "pipeline_schedule_training.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "worker.h"
#include "titan/logging.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/pipeline_schedule.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"
#include "titan/world.hpp"

namespace titan::conformance {

namespace {

constexpr int64_t kRowsPerMicrobatch = 2;
constexpr int64_t kSeqLen = 64;

// The declaration's `pipeline_schedule.training:` section.
struct PipelineTraining {
  int64_t ranks = 2;         // pipeline_parallel_degree, the whole world (dp = 1)
  int64_t microbatches = 4;  // num_pp_microbatches
  int64_t steps = 3;
  double tolerance = 1e-5;
};

PipelineTraining read_training(const ConfigNode& declaration) {
  ConfigNode section = declaration.child("pipeline_schedule").child("training");
  PipelineTraining out;
  out.ranks = section.get<int64_t>("ranks", out.ranks, "pipeline_parallel_degree the schedules train on (the world)");
  out.microbatches = section.get<int64_t>("microbatches", out.microbatches,
                                          "num_pp_microbatches, each 2 rows of 64 tokens");
  out.steps = section.get<int64_t>("steps", out.steps, "training steps compared with one process");
  out.tolerance = section.get<double>(
      "tolerance", out.tolerance, "max relative difference of losses, grad norms and parameters (L2 per tensor)");
  if (out.ranks < 2 || out.ranks > 16) section.fail("ranks", "expected a pp degree in 2..16");
  if (out.microbatches < 1) section.fail("microbatches", "expected a count >= 1");
  if (out.steps < 1) section.fail("steps", "expected a count >= 1");
  if (!(out.tolerance >= 0)) section.fail("tolerance", "expected a number >= 0");
  return out;
}

// The job: llama3 with 6 blocks of dim 64 (8 layer units: up to 8 stages),
// the byte tokenizer (no asset to find), one thread per rank. AdamW's eps is
// 1e-4 so that its update stays linear in gradients near zero: with 1e-8 the
// summation-order noise of microbatches flips their steps and rules the
// parameter difference (2e-6 against 5e-8). Without a schedule: the same
// job on one process, the reference.
std::string job_yaml(const PipelineTraining& training, const std::string& schedule, const std::string& dump) {
  std::ostringstream yaml;
  yaml << "job: {dump_folder: '" << dump << "'}\n"
       << "model: {name: llama3, flavor: debugmodel, tokenizer_path: bytes, dim: 64, n_layers: 6, n_heads: 4}\n"
       << "optimizer: {name: AdamW, lr: 1.0e-3, eps: 1.0e-4, weight_decay: 0.1}\n"
       << "lr_scheduler: {warmup_steps: 0}\n"
       << "training: {local_batch_size: " << training.microbatches * kRowsPerMicrobatch << ", seq_len: " << kSeqLen
       << ", steps: " << training.steps << ", max_norm: 1.0, dataset: stories, seed: 0, threads: 1}\n"
       << "metrics: {log_freq: 1, peak_flops: 1.0e12}\n"  // a peak given: no CPU measurement at start
       << "comm: {init_timeout_seconds: 60, train_timeout_seconds: 60}\n"
       << "debug: {save_final_model: '" << dump << "/final.pt'}\n"
       << "plugins: [";
  if (!schedule.empty()) {
    yaml << "{name: pipeline, pipeline_parallel_degree: " << training.ranks << ", pipeline_parallel_schedule: '"
         << schedule << "', num_pp_microbatches: " << training.microbatches << "}";
  }
  yaml << "]\n";
  return yaml.str();
}

struct RunTrace {
  std::vector<double> losses, grad_norms;
  std::map<std::string, at::Tensor> params;
};

RunTrace read_trace(const std::string& dump) {
  RunTrace trace;
  std::ifstream metrics(dump + "/metrics.jsonl");
  if (!metrics) throw Error("the run wrote no '" + dump + "/metrics.jsonl'");
  for (std::string line; std::getline(metrics, line);) {
    auto record = nlohmann::json::parse(line);
    trace.losses.push_back(record.at("loss_metrics/global_avg_loss").get<double>());
    trace.grad_norms.push_back(record.at("grad_norm").get<double>());
  }
  std::ifstream file(dump + "/final.pt", std::ios::binary);
  if (!file) throw Error("the run wrote no '" + dump + "/final.pt' (debug.save_final_model)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (const auto& item : torch::jit::pickle_load(bytes).toGenericDict()) {
    trace.params[item.key().toStringRef()] = item.value().toTensor().to(at::kDouble);
  }
  return trace;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// Losses and grad norms step by step; parameters in the L2 sense per tensor
// (an element-wise max would be ruled by AdamW's steps on near-zero
// gradients, whose sign flips on 1e-7 noise).
CheckResult compare(const std::string& name, const PipelineTraining& training, const RunTrace& run,
                    const RunTrace& reference) {
  const double inf = std::numeric_limits<double>::infinity();
  auto failed = [&](const std::string& why) { return CheckResult{name, false, false, inf, training.tolerance, why}; };
  if (run.losses.size() != reference.losses.size() || run.grad_norms.size() != reference.grad_norms.size()) {
    return failed(std::to_string(run.losses.size()) + " steps logged, the reference " +
                  std::to_string(reference.losses.size()));
  }
  double loss = 0, norm = 0, param = 0;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    loss = std::max(loss, relative(run.losses[i], reference.losses[i]));
    norm = std::max(norm, relative(run.grad_norms[i], reference.grad_norms[i]));
  }
  std::string worst;
  for (const auto& [key, expected] : reference.params) {
    auto found = run.params.find(key);
    if (found == run.params.end()) return failed("the pipelined run's final parameters lack " + key);
    if (!found->second.sizes().equals(expected.sizes())) return failed(key + " is shaped unlike the reference's");
    const double difference =
        (found->second - expected).norm().item<double>() / std::max(expected.norm().item<double>(), 1e-12);
    if (difference > param || worst.empty()) param = difference, worst = key;
  }
  if (run.params.size() != reference.params.size()) {
    return failed(std::to_string(run.params.size()) + " final parameters, the reference " +
                  std::to_string(reference.params.size()));
  }
  std::ostringstream detail;
  detail.precision(2);
  detail << "max relative difference from one process over " << training.steps << " steps (pp "
         << training.ranks << ", " << training.microbatches << " microbatches): loss " << loss << ", grad norm "
         << norm << ", params " << param << " (" << worst << ")";
  const double measured = std::max({loss, norm, param});
  return {name, measured <= training.tolerance, false, measured, training.tolerance, detail.str()};
}

std::string row_name(const std::string& schedule, const PipelineTraining& training) {
  return "pipeline_schedule." + schedule + ".training@" + std::to_string(training.ranks);
}

CheckResults pipeline_training_worker(const WorkerArgs& args) {
  PluginRegistry::instance().load(args.plugin);  // its schedules, which the pipeline plugin names
  const PipelineTraining training = read_training(ConfigNode::load_file(args.declaration));
  const std::string& schedule = args.value("schedule");
  const World world = detect_world();
  init_logging(world.rank);
  const std::string dump = args.scratch + "/dump";
  ConfigNode config = ConfigNode::parse(job_yaml(training, schedule, dump), "conformance pipeline job");
  RunSpec spec = resolve_run(config, world.rank, world.world_size);
  train(spec, world);
  const std::string& reference = args.value("reference");
  if (world.rank != 0 || reference.empty()) return {};  // rank 0 holds metrics.jsonl and final.pt
  return {compare(row_name(schedule, training), training, read_trace(dump), read_trace(reference))};
}

}  // namespace

void register_pipeline_training_worker() { register_worker("pipeline_training", pipeline_training_worker); }

CheckResults check_pipeline_training(const std::string& plugin, const std::string& declaration_path,
                                     const ConfigNode& declaration, const std::vector<std::string>& schedules,
                                     const std::map<std::string, std::string>& not_run, const std::string& scratch) {
  const PipelineTraining training = read_training(declaration);
  auto& registry = PluginRegistry::instance();
  // Why each schedule is not trained ("" when it is), in the plugin's order.
  std::vector<std::string> skip_reason;
  for (const std::string& name : schedules) {
    auto found = not_run.find(name);
    if (found != not_run.end()) {
      skip_reason.push_back(found->second);
      continue;
    }
    // As the trainer: the schedule with no options, the stage count the
    // pipeline plugin's default split gives (pp x its fewest stages per rank).
    auto schedule = registry.create_pipeline_schedule(name, PluginContext{});
    const PipelineShape shape{training.ranks, training.ranks * schedule->stages_per_rank().min,
                              training.microbatches};
    try {
      validate_pipeline_shape(*schedule, shape);
      skip_reason.emplace_back();
    } catch (const std::exception& error) {
      skip_reason.push_back("refuses the training shape (" + shape.to_string() + "): " + first_line(error.what()) +
                            "; declare pipeline_schedule.training.microbatches or .ranks it runs");
    }
  }
  const bool any = std::any_of(skip_reason.begin(), skip_reason.end(), [](const std::string& r) { return r.empty(); });
  CheckResults rows;
  const std::string reference = scratch + "/pipeline_schedule.reference";
  if (any) {
    WorkerRun run;
    run.worker = "pipeline_training";
    run.args = {plugin, declaration_path, reference, {{"schedule", ""}, {"reference", ""}}};
    run.ranks = 1;
    run.deadline = std::chrono::seconds(120);
    run.row_on_failure = "pipeline_schedule.training_reference";
    rows = run_workers(run);  // empty unless it failed
  }
  const bool have_reference = rows.empty();
  for (size_t i = 0; i < schedules.size(); ++i) {
    const std::string name = row_name(schedules[i], training);
    if (!skip_reason[i].empty() || !have_reference) {
      rows.push_back({name, false, true, 0, 0,
                      "not trained: " + (have_reference ? skip_reason[i] : "the one-process reference failed")});
      continue;
    }
    WorkerRun run;
    run.worker = "pipeline_training";
    run.args = {plugin, declaration_path, scratch + "/pipeline_schedule." + schedules[i],
                {{"schedule", schedules[i]}, {"reference", reference + "/dump"}}};
    run.ranks = static_cast<int>(training.ranks);
    run.deadline = std::chrono::seconds(120);
    run.row_on_failure = name;
    CheckResults result = run_workers(run);
    rows.insert(rows.end(), result.begin(), result.end());
  }
  return rows;
}

}  // namespace titan::conformance
