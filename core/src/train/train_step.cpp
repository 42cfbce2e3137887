// The trainer's step: its data, the shared step (titan/training_step.hpp:
// forward and backward, loss over the job, clipping, the model's hooks, the
// optimizer), then what the trainer adds: non-finite handling, collective
// verification and the step's record for the metrics.
#include <ATen/ATen.h>

#include <chrono>
#include <cmath>

#include "training_run.hpp"
#include "replica_step.hpp"

#include "merge_metrics.hpp"
#include "titan/error.hpp"
#include "titan/training_step.hpp"
#include "titan/host_value.hpp"
#include "titan/logging.hpp"

namespace titan {

StepOutcome TrainingRun::step(int64_t step) {
  const TrainingConfig& training = spec.core.training;
  const bool dry_run = seams.shapes_only;
  observer->begin_step(step);
  if (host_reads) host_reads->take();  // what ran between steps (logging, checkpoints) is not the step's
  CallSite step_site("step " + std::to_string(step));  // observers see "step 12 / fsdp all_gather layers.3"

  // Where the data stood, should fault tolerance discard the step.
  const bool may_discard = replicas && batches;
  const int64_t position_before = may_discard ? batches->position() : 0;
  const nlohmann::json cursor_before = may_discard ? batches->cursor() : nlohmann::json();
  // ... and the model's own state (MoE's expert biases), which its hooks
  // update before the vote.
  const auto hook_state_before = may_discard ? hook_state_copies() : decltype(hook_state_copies()){};
  const auto loading_start = std::chrono::steady_clock::now();
  std::vector<Microbatch> microbatches = next_microbatches();
  const double data_loading_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loading_start).count();

  // Nothing in the step reads a tensor's value on the host except on log
  // steps (and once a step under on_nonfinite_loss: skip): on a GPU each
  // read would wait for the device's queue to drain.
  const bool log_step = step % spec.core.metrics.log_freq == 0 || step == training.steps;
  StepOptions options;
  options.lr = spec.optimizer->base_lr() * spec.lr_schedule->factor(step);
  options.log_step = log_step;
  options.skip_nonfinite = training.on_nonfinite_loss == "skip" && !dry_run;
  options.count_state_bytes = log_step || dry_run;
  options.observer = replica_observer_ ? static_cast<StepObserver*>(replica_observer_.get()) : observer.get();
  if (replicas) options.sum_over_replica_groups = [this](at::Tensor& tensor) { replicas->sum(tensor); };
  if (graphed_) {
    options.runner = [this](const std::vector<Microbatch>& batch, const ForwardBackward& forward_backward) {
      return graphed_->run(batch, forward_backward);
    };
  }
  StepResult result = run_training_step(step_parts_, microbatches, options);

  StepOutcome outcome;
  outcome.optimizer_skipped = result.optimizer_skipped;
  if (result.discarded) {
    // The same data and model state again, with the next quorum.
    at::NoGradGuard no_grad;
    for (const auto& [tensor, copy] : hook_state_before) tensor.copy_(copy);
    if (!cursor_before.is_null()) {
      batches->seek(cursor_before);
    } else {
      batches->set_position(position_before);
    }
    outcome.discarded = true;
    return outcome;
  }
  if (result.optimizer_skipped) {
    spdlog::warn("step {}: non-finite loss {} / grad norm {}; optimizer step skipped", step,
                 host_value<double>(result.loss.sum()), host_value<double>(result.grad_norm.sum()));
  }
  if (training.on_nonfinite_loss == "error") {
    // The first step whose loss or norm was not finite, read on log steps
    // and before a checkpoint is written (check_nonfinite).
    const at::Tensor& finite = result.finite;
    if (!first_nonfinite_step_.defined()) first_nonfinite_step_ = at::full({1}, int64_t{-1}, finite.options().dtype(at::kLong));
    first_nonfinite_step_ = at::where(first_nonfinite_step_ >= 0, first_nonfinite_step_,
                                      at::where(finite, first_nonfinite_step_, step));
    if (log_step) check_nonfinite();
  }
  if (spec.core.comm.verify_collectives && world.distributed() && verifier.due(step, step == resumed_step + 1) &&
      !dry_run) {
    CallSite site("verify_collectives");
    verifier.verify(*parallel->mesh(), step);
  }
  const DeviceMesh* mesh = parallel->mesh();
  // Each pipeline stage's hooks measure their own stage; rank 0 logs them all.
  if (hook_metrics_over_pp_ && log_step) result.model_metrics = merge_metrics_over(mesh->group("pp"), result.model_metrics);
  outcome.record.step = step;
  outcome.record.lr = options.lr;
  outcome.record.tokens = training.local_batch_size * training.seq_len * accumulation_;
  outcome.record.data_loading_s = data_loading_s;
  outcome.record.state_bytes = result.state_bytes;
  outcome.record.extra = std::move(result.model_metrics);
  if (replicas) {
    // Which replica groups this step's gradients came from.
    outcome.record.extra["ft_replica_groups"] = static_cast<double>(replicas->participants());
    outcome.record.extra["ft_replica_mask"] = replicas->member_mask();
    outcome.record.extra["ft_join_s"] = replica_join_s_;  // the quorum before the step (and any healing)
  }
  outcome.record.numbers = at::cat({result.loss, result.max_loss, result.grad_norm});  // [loss, max loss, grad norm]
  if (host_reads) {
    HostReadCounter::Reads reads = host_reads->take();
    outcome.record.host_reads = reads.count;
    outcome.record.host_read_sites = std::move(reads.sites);
  }
  return outcome;
}

void TrainingRun::check_nonfinite() {
  if (!first_nonfinite_step_.defined() || seams.shapes_only) return;
  const int64_t bad = host_value<int64_t>(first_nonfinite_step_.sum());
  if (bad < 0) return;
  throw Error("step " + std::to_string(bad) + ": the loss or the gradient norm is not finite; training stopped "
              "(checkpoints already saved are kept, none is written after it). Lower optimizer.lr, check the data, or "
              "set training.on_nonfinite_loss=skip to skip such steps");
}

std::vector<Microbatch> TrainingRun::next_microbatches() {
  const TrainingConfig& training = spec.core.training;
  // Loaded ahead, on the prefetcher's thread.
  BatchPrefetcher::Step loaded;
  if (batches) {
    loaded = batches->next();
  } else {  // the dry run: token ids of the right shape
    for (int64_t i = 0; i < accumulation_; ++i) {
      loaded.windows.push_back(at::zeros({training.local_batch_size, training.seq_len + 1}, at::kLong));
    }
  }
  const std::vector<at::Tensor>& windows = loaded.windows;
  const int64_t global_labels = loaded.global_labels;  // that carry loss, over the whole step: the loss's denominator
  const double weight_per_label =
      global_labels > 0 ? static_cast<double>(data_degree_) / static_cast<double>(global_labels) : 0;
  std::vector<Microbatch> microbatches;
  for (const at::Tensor& batch : windows) microbatches.push_back(microbatch_of(batch, device, documents_, weight_per_label));
  return microbatches;
}

}  // namespace titan
