// One training run, as TorchTitan's Trainer splits it: everything is built
// once (training_run.cpp: device, data, parallelism, model, optimizer,
// resume), then each step is one call of step() (train_step.cpp), and
// trainer.cpp's loop adds metrics, checkpoints and the stop conditions.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective_verifier.hpp"
#include "host_read_counter.hpp"
#include "graphed_step.hpp"
#include "memory_snapshot.hpp"
#include "memory_metrics.hpp"
#include "step_profiler.hpp"
#include "validator.hpp"
#include "parallel_setup.hpp"
#include "step_metrics.hpp"
#include "run_seams.hpp"
#include "train_state.hpp"
#include "titan/data.hpp"
#include "titan/optimizer.hpp"
#include "titan/run_spec.hpp"
#include "titan/microbatch_runner.hpp"
#include "titan/training_step.hpp"
#include "titan/world.hpp"

namespace titan {

class PipelineExecutor;
class ReplicaGroups;

// What a step did, beyond what the metrics log.
struct StepOutcome {
  StepRecord record;
  bool optimizer_skipped = false;  // non-finite loss under on_nonfinite_loss: skip
  // Fault tolerance: a replica group failed during the step; nothing was
  // applied, the data is back where the step began, and the step runs again.
  bool discarded = false;
};

class TrainingRun {
 public:
  // `seams`: the dry run's shapes_only, and the observer (fault hooks) that
  // watches the run.
  TrainingRun(RunSpec& spec, const World& world, const RunSeams& seams);
  ~TrainingRun();

  // Forward and backward over the step's microbatches (gradient
  // accumulation or the pipeline schedule), the loss reduced over the job,
  // gradients clipped, the optimizer and LR stepped.
  StepOutcome step(int64_t step);
  // on_nonfinite_loss: error: throws naming the first step whose loss or
  // gradient norm was not finite (one host read). Log steps call it, and
  // the trainer before it writes a checkpoint and at the end.
  void check_nonfinite();
  // Fault tolerance: joins the quorum of replica groups before `step`; a
  // group behind takes the state of an up-to-date peer (and a source sends
  // its own). Returns the step to run: `step`, or the one after the peer's.
  int64_t join_replica_groups(int64_t step);

  // Members in the order they are built; they are torn down in reverse
  // (the model before its groups, the observers after every collective).
  RunSpec& spec;
  const World world;
  const c10::Device device;
  std::unique_ptr<MemoryMetrics> memory;  // built first: on CPU it counts the allocations from here on
  CollectiveVerifier verifier;  // comm.verify_collectives: each group's sequences across its ranks
  std::unique_ptr<StepProfiler> profiler;  // the profiling section (also sees every collective)
  std::unique_ptr<HostReadCounter> host_reads;  // debug.count_host_reads
  std::unique_ptr<MemorySnapshot> memory_snapshot;  // profiling.enable_memory_snapshot, and clear OOM errors
  struct ObserverScope;
  std::unique_ptr<ObserverScope> observers;
  std::unique_ptr<ParallelSetup> parallel;
  std::unique_ptr<ReplicaGroups> replicas;  // fault_tolerance.enable
  std::unique_ptr<TokenWindowLoader> loader;
  std::unique_ptr<BatchPrefetcher> batches;  // the loader's steps, loaded ahead on a thread
  std::shared_ptr<CausalLM> model;  // a pipeline's parts, seen as one model, when pipelined
  std::unique_ptr<PipelineExecutor> pipeline;  // when pipelined
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainStateView> state;
  int64_t resumed_step = 0;  // the step a checkpoint resumed after (0: a fresh start)
  bool loaded_initial_weights = false;  // checkpoint.initial_load_path gave the weights
  std::unique_ptr<StepMetrics> metrics;
  std::unique_ptr<Validator> validator;  // the validation section (null when off)
  const RunSeams seams;
  const std::shared_ptr<RunObserver> observer;  // seams.observer, or one that does nothing

 private:
  void build_model();
  void build_optimizer_and_schedule();
  void build_dry_run();
  void use_replica_groups();
  // Each step hook's state tensor with a copy of its value now (the step
  // may be discarded after the hooks changed it).
  std::vector<std::pair<at::Tensor, at::Tensor>> hook_state_copies() const;  // replica_step.cpp
  std::vector<Microbatch> next_microbatches();

  std::unique_ptr<MicrobatchRunner> default_runner_;
  std::unique_ptr<GraphedStep> graphed_;  // training.cuda_graph
  // What the shared step runs on (titan/training_step.hpp); its schedule is
  // the pipeline, a schedule plugin, or plain gradient accumulation.
  StepParts step_parts_;
  at::Tensor first_nonfinite_step_;  // [1] int64 on the device, -1 while every step was finite
  int64_t accumulation_ = 1;  // microbatches per step
  // How many share the data (data parallelism, times the replica groups
  // under fault tolerance): the loss's weight per label.
  int64_t data_degree_ = 1;
  struct ReplicaStepObserver;
  std::unique_ptr<ReplicaStepObserver> replica_observer_;  // the run's observer, then the replica groups
  double replica_join_s_ = 0;  // the last join_replica_groups: asking the quorum, healing included
  DocumentOptions documents_;  // block-causal positions, labels ignored across document ends
  // training.mixed_precision_param where no parallelizer applies it: the forward autocasts to it.
  std::optional<c10::ScalarType> autocast_dtype_;
  c10::ScalarType compute_dtype_ = c10::kFloat;  // the parameters' (the precision plugin's or mixed_precision_param)
  bool hook_metrics_over_pp_ = false;  // the step hooks' metrics of every pipeline stage are merged on log steps
};

}  // namespace titan
