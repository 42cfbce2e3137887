// The dry run's driver: one RunPlan per rank (plugins parse their options
// with the rank's place), one thread per rank running the real
// TrainingRun on meta tensors, then the ranks' tallies as the report.
#include "titan/dry_run.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "dry_rank.hpp"
#include "model/tensor_bytes.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/layout_search.hpp"
#include "titan/run_spec.hpp"
#include "train/host_read_counter.hpp"
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

// Ranks differing only along these dims run the same program on other
// values: the data-parallel dims (other tokens) and tp (other shards of
// the same shapes). docs/planning.md has the argument; cp is not among
// them (ring attention skips the blocks a rank's causal mask hides).
const std::vector<std::string> kAlikeDims = {"dp_replicate", "dp_shard", "tp"};

// Every rank's representative: the rank with the same coordinates along
// the other dims and, along each alike dim, the last coordinate if it has
// it and 0 otherwise. First and last both run, so what only an edge rank
// does (rank 0's duties, the last shard) is simulated too.
std::vector<int> representatives(const RunSpec& spec, int world_size, bool every_rank) {
  std::vector<int> result(static_cast<size_t>(world_size));
  if (every_rank || world_size == 1) {
    for (int rank = 0; rank < world_size; ++rank) result[rank] = rank;
    return result;
  }
  const auto degrees = resolve_mesh_degrees(mesh_requests(spec), world_size);
  const auto splits = mesh_splits(spec);
  std::map<std::map<std::string, int64_t>, int> first_of;  // the other dims' coordinates -> representative
  for (int rank = 0; rank < world_size; ++rank) {
    std::map<std::string, int64_t> others;
    for (const auto& [dim, coordinate] : mesh_slices(degrees, splits, rank).coordinates) {
      if (std::find(mesh_dim_order().begin(), mesh_dim_order().end(), dim) == mesh_dim_order().end()) continue;
      const bool alike = std::find(kAlikeDims.begin(), kAlikeDims.end(), dim) != kAlikeDims.end();
      others[dim] = !alike || coordinate == degrees.at(dim) - 1 ? coordinate : 0;
    }
    result[rank] = first_of.try_emplace(others, rank).first->second;
  }
  return result;
}

// The condition under which data-parallel ranks are alike: every piece a
// parameter is cut into is the same size (an uneven FSDP shard gives the
// last rank fewer rows, so other buffers and collectives).
void check_even_shards(const CausalLM& model, const DeviceMesh& mesh) {
  for (const auto& item : model.named_parameters()) {
    const TensorLayout* layout = model.layout(item.key());
    if (!layout) continue;
    std::vector<int64_t> pieces(layout->global_shape.size(), 1);
    for (size_t i = 0; i < layout->placements.size(); ++i) {
      if (layout->placements[i].kind == Placement::Kind::shard) {
        pieces.at(static_cast<size_t>(layout->placements[i].dim)) *= mesh.size(layout->mesh_dims[i]);
      }
    }
    for (size_t d = 0; d < pieces.size(); ++d) {
      if (layout->local_shape[d] * pieces[d] == layout->global_shape[d]) continue;
      throw Error("parameter '" + item.key() + "' (" + layout->describe() +
                  ") is split unevenly, so data-parallel ranks hold different pieces and are not alike; plan with "
                  "--every-rank to simulate each one");
    }
  }
}

// The checkpoint's save plan for this rank: the parameters and optimizer
// state it writes, each piece by its first copy (TensorLayout::
// is_first_copy, the rank dcp has write it; a tensor without a layout is
// whole on every rank).
int64_t checkpoint_bytes(const CausalLM& model, Optimizer& optimizer, const DeviceMesh* mesh) {
  auto writes = [&](const std::string& param, const at::Tensor& tensor) {
    if (!mesh) return true;
    const TensorLayout* layout = model.layout(param);
    return layout ? layout->is_first_copy(*mesh) : TensorLayout::replicated(tensor.sizes().vec()).is_first_copy(*mesh);
  };
  int64_t bytes = 0;
  for (const auto& item : model.named_parameters()) {
    if (writes(item.key(), item.value())) bytes += tensor_bytes(item.value());
  }
  for (const auto& [name, tensor] : optimizer.state_tensors()) {  // "<param>.<state>"
    if (writes(name.substr(0, name.rfind('.')), tensor)) bytes += tensor_bytes(tensor);
  }
  return bytes;
}

// Counts, into the thread's dry-run rank, each op that would make the host
// wait for a GPU.
std::unique_ptr<at::ObserverContext> note_host_wait(const at::RecordFunction& fn) {
  DryRank* rank = current_dry_rank();
  if (!rank || !makes_host_wait(fn, /*on_device=*/true)) return nullptr;
  DryRankTally& tally = rank->tally;
  ++tally.host_waits;
  if (tally.host_wait_sites.size() < 4) tally.host_wait_sites.push_back(host_wait_site(fn));
  return nullptr;
}

// The callback on this rank's thread while it lives (autograd runs the
// backward of meta tensors on the calling thread, as of CPU ones).
class HostWaitWatch {
 public:
  HostWaitWatch()
      : handle_(at::addThreadLocalCallback(at::RecordFunctionCallback(note_host_wait)
                                               .needsInputs(true)
                                               .scopes({at::RecordScope::FUNCTION}))) {}
  ~HostWaitWatch() { at::removeCallback(handle_); }
  HostWaitWatch(const HostWaitWatch&) = delete;
  HostWaitWatch& operator=(const HostWaitWatch&) = delete;

 private:
  at::CallbackHandle handle_;
};

void run_rank(RunSpec& spec, DryRank& dry, const DryRunOptions& options, bool check_alike, std::mutex& plugin_mutex,
              RankPlan& out) {
  DryRankScope scope(dry);
  DryRankTally& tally = dry.tally;
  tally.phase = "build";
  World world;
  world.rank = dry.rank;
  world.world_size = options.world_size;
  world.source = "dry run";
  RunSeams seams;
  seams.shapes_only = true;
  seams.plugin_mutex = &plugin_mutex;
  seams.simulated_groups = [&dry](const std::string& name, const std::vector<int>& ranks) {
    return dry.world->new_group(name, ranks, dry.rank, &dry.events);
  };
  TrainingRun run(spec, world, seams);
  if (check_alike && run.parallel->mesh()) check_even_shards(*run.model, *run.parallel->mesh());
  StepOutcome outcome;
  for (int64_t step = 1; step <= options.steps; ++step) {
    tally.phase = "step " + std::to_string(step);
    std::optional<HostWaitWatch> host_waits;  // the measured step only: it captures every op's inputs
    if (step == options.steps) {
      dry.events.clear();
      tally.restart_peak();
      tally.restart_flops();
      host_waits.emplace();
    }
    outcome = run.step(step);
  }
  out.rank = dry.rank;
  if (const DeviceMesh* mesh = run.parallel->mesh()) {
    for (const std::string& dim : mesh_dim_order()) {
      if (mesh->size(dim) > 1) out.coordinates[dim] = mesh->coordinate(dim);
    }
  }
  for (const auto& param : run.model->parameters()) out.parameter_bytes += tensor_bytes(param);
  for (const auto& [name, tensor] : run.optimizer->state_tensors()) out.optimizer_bytes += tensor_bytes(tensor);
  out.gradient_bytes = outcome.record.state_bytes - out.parameter_bytes - out.optimizer_bytes;
  out.checkpoint_bytes = checkpoint_bytes(*run.model, *run.optimizer, run.parallel->mesh());
  out.peak_bytes = tally.peak;
  out.peak_at = tally.peak_at;
  out.flops = tally.flops;
  out.recompute_flops = tally.recompute_flops;
  out.collectives = dry.events;
  out.host_waits = tally.host_waits;
  out.host_wait_sites = tally.host_wait_sites;
}

}  // namespace

DryRunReport dry_run(const ConfigNode& config, const DryRunOptions& options) {
  if (options.world_size < 1) throw Error("dry run: the world size must be at least 1");
  if (options.steps < 1) throw Error("dry run: at least one step");
  const auto start = std::chrono::steady_clock::now();
  internal::install_meta_allocator();
  install_counting_matmuls();
  install_range_tracker();
  at::set_num_threads(1);  // meta kernels do no work to split

  // Rank 0 plans from the caller's config, so that config errors name its
  // file and line; every other simulated rank from its own copy.
  std::map<int, RunSpec> plans;
  plans.emplace(0, resolve_run(config, 0, options.world_size));
  const std::vector<int> representative = representatives(plans.at(0), options.world_size, options.every_rank);
  std::vector<int> simulated;
  for (int rank = 0; rank < options.world_size; ++rank) {
    if (representative[rank] != rank) continue;
    simulated.push_back(rank);
    if (rank == 0) continue;
    plans.emplace(rank, resolve_run(ConfigNode::parse(config.dump(), "the config (rank " + std::to_string(rank) + "'s copy)"),
                                 rank, options.world_size));
  }

  DryRunReport report;
  report.world_size = options.world_size;
  report.measured_step = options.steps;
  {
    const RunSpec& spec = plans.at(0);
    const TrainingConfig& training = spec.core.training;
    report.model = spec.model_plugin + " " + spec.model->flavor();
    report.parameters = spec.model->num_params();
    const auto degrees = resolve_mesh_degrees(mesh_requests(spec), options.world_size);
    int64_t dp = 1;
    for (const auto& [dim, degree] : degrees) {
      if (degree > 1) report.mesh += (report.mesh.empty() ? "" : ", ") + dim + "=" + std::to_string(degree);
      if (dim == "dp_replicate" || dim == "dp_shard") dp *= degree;
    }
    const int64_t batch = training.global_batch_size > 0 ? training.global_batch_size : training.local_batch_size * dp;
    report.tokens_per_step = batch * training.seq_len;
    report.degrees = degrees;
    const bool bf16 = spec.precision ? spec.precision->param_dtype() == c10::kBFloat16
                                     : training.mixed_precision_param == "bfloat16";
    report.float32_matmuls = !bf16;
    try {  // the block count, for the estimate's overlap and bubble (a model without HF names has none)
      report.layers = read_model_shape(spec.model_plugin, spec.model->flavor(), training.seq_len).layers;
    } catch (const Error&) {
    }
    if (spec.pipeline) {
      const PipelineSettings& settings = spec.pipeline->settings();
      report.pipeline_schedule = settings.schedule;
      report.pipeline_microbatches =
          settings.microbatches > 0 ? settings.microbatches : training.local_batch_size / settings.microbatch_size;
    }
    report.model_flops_per_step = spec.model->flops_per_token(training.seq_len) * report.tokens_per_step;
  }

  SimulatedWorld world(options.world_size, representative, options.serial);
  // Tallies outlive the threads: a meta tensor freed late still finds its own.
  static std::deque<DryRank> tallies;
  std::vector<DryRank*> ranks;
  for (int rank : simulated) {
    tallies.emplace_back();
    tallies.back().rank = rank;
    tallies.back().world = &world;
    ranks.push_back(&tallies.back());
  }
  report.ranks.resize(simulated.size());
  for (int rank = 0; rank < options.world_size; ++rank) {
    const auto at = std::find(simulated.begin(), simulated.end(), representative[rank]) - simulated.begin();
    report.ranks[static_cast<size_t>(at)].stands_for.push_back(rank);
  }
  const bool check_alike = simulated.size() < static_cast<size_t>(options.world_size);
  std::mutex plugin_mutex;  // the ranks' threads transform their models one at a time
  std::vector<std::thread> threads;
  for (size_t i = 0; i < simulated.size(); ++i) world.rank_started();
  for (size_t i = 0; i < simulated.size(); ++i) {
    threads.emplace_back([&, i] {
      const int rank = simulated[i];
      world.enter();
      try {
        run_rank(plans.at(rank), *ranks[i], options, check_alike, plugin_mutex, report.ranks[i]);
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
