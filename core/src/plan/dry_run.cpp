// The dry run's driver: one RunPlan per rank (plugins parse their options
// with the rank's place), one thread per rank running the real
// TrainingRun on meta tensors, then the ranks' tallies as the report.
#include "titan/dry_run.hpp"

#include <ATen/Parallel.h>

#include <chrono>
#include <deque>
#include <thread>

#include "dry_rank.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/run_plan.hpp"
#include "train/training_run.hpp"

namespace titan {

std::map<std::pair<std::string, std::string>, RankPlan::Traffic> RankPlan::traffic() const {
  std::map<std::pair<std::string, std::string>, Traffic> totals;
  for (const auto& event : collectives) {
    Traffic& total = totals[{event.group.substr(0, event.group.find('/')), event.op}];
    ++total.calls;
    total.bytes += event.bytes;
  }
  return totals;
}

namespace {

int64_t bytes_of(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.numel() * tensor.element_size()) : 0;
}

void run_rank(RunPlan& plan, DryRank& dry, const DryRunOptions& options, RankPlan& out) {
  DryRankScope scope(dry);
  DryRankTally& tally = dry.tally;
  tally.phase = "build";
  World world;
  world.rank = dry.rank;
  world.world_size = options.world_size;
  world.source = "dry run";
  TrainingRun run(plan, world);
  StepOutcome outcome;
  for (int64_t step = 1; step <= options.steps; ++step) {
    tally.phase = "step " + std::to_string(step);
    if (step == options.steps) {
      dry.events.clear();
      tally.restart_peak();
      tally.restart_flops();
    }
    outcome = run.step(step);
  }
  out.rank = dry.rank;
  if (const DeviceMesh* mesh = run.parallel->mesh()) {
    for (const std::string& dim : mesh_dim_order()) {
      if (mesh->size(dim) > 1) out.coordinates[dim] = mesh->coordinate(dim);
    }
  }
  for (const auto& param : run.model->parameters()) out.parameter_bytes += bytes_of(param);
  for (const auto& [name, tensor] : run.optimizer->state_tensors()) out.optimizer_bytes += bytes_of(tensor);
  out.gradient_bytes = outcome.record.state_bytes - out.parameter_bytes - out.optimizer_bytes;
  out.peak_bytes = tally.peak;
  out.peak_at = tally.peak_at;
  out.flops = tally.flops;
  out.recompute_flops = tally.recompute_flops;
  out.collectives = dry.events;
}

}  // namespace

DryRunReport dry_run(const ConfigNode& config, const DryRunOptions& options) {
  if (options.world_size < 1) throw Error("dry run: the world size must be at least 1");
  if (options.steps < 1) throw Error("dry run: at least one step");
  const auto start = std::chrono::steady_clock::now();
  install_meta_allocator();
  install_counting_matmuls();
  install_range_tracker();
  at::set_num_threads(1);  // meta kernels do no work to split

  std::vector<RunPlan> plans;
  plans.reserve(static_cast<size_t>(options.world_size));
  // Each rank reads its own copy of the config: plugins read options (and
  // the config marks keys as used) while the ranks run side by side.
  // Rank 0 reads the caller's, so that config errors name its file and line.
  const std::string text = config.dump();
  for (int rank = 0; rank < options.world_size; ++rank) {
    plans.push_back(plan_run(rank == 0 ? config : ConfigNode::parse(text, "the config (rank " + std::to_string(rank) + "'s copy)"),
                             rank, options.world_size));
  }

  DryRunReport report;
  report.world_size = options.world_size;
  report.measured_step = options.steps;
  {
    const RunPlan& plan = plans.front();
    const TrainingConfig& training = plan.core.training;
    report.model = plan.model_plugin + " " + plan.model->flavor();
    report.parameters = plan.model->num_params();
    const auto degrees = resolve_mesh_degrees(mesh_requests(plan), options.world_size);
    int64_t dp = 1;
    for (const auto& [dim, degree] : degrees) {
      if (degree > 1) report.mesh += (report.mesh.empty() ? "" : ", ") + dim + "=" + std::to_string(degree);
      if (dim == "dp_replicate" || dim == "dp_shard") dp *= degree;
    }
    const int64_t batch = training.global_batch_size > 0 ? training.global_batch_size : training.local_batch_size * dp;
    report.tokens_per_step = batch * training.seq_len;
    report.model_flops_per_step = plan.model->flops_per_token(training.seq_len) * report.tokens_per_step;
  }

  SimulatedWorld world(options.world_size);
  // Tallies outlive the threads: a meta tensor freed late still finds its own.
  static std::deque<DryRank> tallies;
  std::vector<DryRank*> ranks;
  for (int rank = 0; rank < options.world_size; ++rank) {
    tallies.emplace_back();
    tallies.back().rank = rank;
    tallies.back().world = &world;
    ranks.push_back(&tallies.back());
  }
  report.ranks.resize(static_cast<size_t>(options.world_size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < options.world_size; ++rank) world.rank_started();
  for (int rank = 0; rank < options.world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        run_rank(plans[rank], *ranks[rank], options, report.ranks[rank]);
      } catch (const SimulationStopped&) {  // another rank's failure, reported once
      } catch (const std::exception& error) {
        world.stop("rank " + std::to_string(rank) + ": " + error.what());
      }
      world.rank_finished();
    });
  }
  for (auto& thread : threads) thread.join();
  for (DryRank* rank : ranks) rank->world = nullptr;
  if (const std::string failure = world.failure(); !failure.empty()) {
    throw Error("dry run at " + std::to_string(options.world_size) + " ranks: " + failure);
  }
  const std::vector<std::string> unreceived = world.unreceived_sends();
  if (!unreceived.empty()) {
    std::string text;
    for (const auto& line : unreceived) text += "\n  " + line;
    throw Error("dry run at " + std::to_string(options.world_size) + " ranks: " +
                std::to_string(unreceived.size()) + " sends were never received:" + text);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace titan
