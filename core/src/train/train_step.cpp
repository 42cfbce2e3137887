// One training step: data -> forward and backward over the microbatches ->
// the loss over the job -> gradient clipping -> optimizer and LR.
#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "training_run.hpp"

#include "merge_metrics.hpp"
#include "plan/dry_rank.hpp"
#include "titan/error.hpp"
#include "titan/grad_clip.hpp"
#include "titan/host_value.hpp"
#include "titan/logging.hpp"
#include "titan/profile_range.hpp"

namespace titan {

StepOutcome TrainingRun::step(int64_t step) {
  const TrainingConfig& training = plan.core.training;
  const bool dry_run = current_dry_rank() != nullptr;
  hooks.begin_step(step);
  if (host_reads) host_reads->take();  // what ran between steps (logging, checkpoints) is not the step's
  CallSite step_site("step " + std::to_string(step));  // observers see "step 12 / fsdp all_gather layers.3"

  const auto loading_start = std::chrono::steady_clock::now();
  std::vector<Microbatch> microbatches = next_microbatches();
  const double data_loading_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loading_start).count();
  auto forward_backward = [&](const std::vector<Microbatch>& batch) {
    ProfileRange range("forward_backward");
    return schedule_->forward_backward(*model, batch, model->loss());
  };
  at::Tensor local_loss = graphed_ ? graphed_->run(microbatches, forward_backward) : forward_backward(microbatches);
  model->finalize_gradients();

  // Nothing below reads a tensor's value on the host except on log steps
  // (and once a step under on_nonfinite_loss: skip): on a GPU each read
  // would wait for the device's queue to drain.
  const bool log_step = step % plan.core.metrics.log_freq == 0 || step == training.steps;
  const ParallelSetup::JobLossTensors job_loss = parallel->loss_tensors_over_job(local_loss);
  const at::Tensor loss = hooks.loss_seen(job_loss.average);
  // On the loss's device, where the step's numbers are kept together.
  const at::Tensor grad_norm = clip_grad_norm_on_device(parameters_, training.max_norm, 2.0, norm_reduce_, norm_weights_)
                                   .reshape({1})
                                   .to(loss.device());
  const double lr = plan.optimizer->base_lr() * plan.lr_schedule->factor(step);
  // The model's own work before the optimizer (its step hooks: MoE load
  // balancing, TorchTitan's optimizer pre-step hook), with its metrics.
  const DeviceMesh* mesh = parallel->mesh();
  std::map<std::string, double> model_metrics;
  for (const StepHook* hook : model->step_hooks()) {
    if (hook->before_optimizer) model_metrics.merge(hook->before_optimizer({mesh, log_step}));
  }
  // Finite iff both are (ops the dry run's meta tensors have too).
  const at::Tensor finite = at::isfinite(loss + grad_norm);
  StepOutcome outcome;
  if (training.on_nonfinite_loss == "skip" && !dry_run && !host_value<bool>(finite.all())) {
    spdlog::warn("step {}: non-finite loss {} / grad norm {}; optimizer step skipped", step,
                 host_value<double>(loss.sum()), host_value<double>(grad_norm.sum()));
    outcome.optimizer_skipped = true;
  } else {
    hooks.before_optimizer();
    ProfileRange range("optimizer");
    CallSite site("optimizer");
    optimizer->step(lr);
  }
  if (training.on_nonfinite_loss == "error") {
    // The first step whose loss or norm was not finite, read on log steps
    // and before a checkpoint is written (check_nonfinite).
    if (!first_nonfinite_step_.defined()) first_nonfinite_step_ = at::full({1}, int64_t{-1}, finite.options().dtype(at::kLong));
    first_nonfinite_step_ = at::where(first_nonfinite_step_ >= 0, first_nonfinite_step_,
                                      at::where(finite, first_nonfinite_step_, step));
    if (log_step) check_nonfinite();
  }
  if (plan.core.comm.verify_collectives && world.distributed() && verifier.due(step, step == resumed_step + 1) &&
      !dry_run) {
    CallSite site("verify_collectives");
    verifier.verify(*parallel->mesh(), step);
  }
  const int64_t tokens = training.local_batch_size * training.seq_len * accumulation_;
  // Each pipeline stage's hooks measure their own stage; rank 0 logs them all.
  if (hook_metrics_over_pp_ && log_step) model_metrics = merge_metrics_over(mesh->group("pp"), model_metrics);
  outcome.record.step = step;
  outcome.record.lr = lr;
  outcome.record.tokens = tokens;
  outcome.record.data_loading_s = data_loading_s;
  outcome.record.state_bytes = state_bytes();
  outcome.record.extra = std::move(model_metrics);
  // [loss, max loss, grad norm]; a test hook's NaN loss shows in both.
  const at::Tensor max_loss = at::where(at::isfinite(loss), job_loss.max, loss);
  outcome.record.numbers = at::cat({loss, max_loss, grad_norm});
  if (host_reads) {
    HostReadCounter::Reads reads = host_reads->take();
    outcome.record.host_reads = reads.count;
    outcome.record.host_read_sites = std::move(reads.sites);
  }
  optimizer->zero_grad();
  return outcome;
}

void TrainingRun::check_nonfinite() {
  if (!first_nonfinite_step_.defined() || current_dry_rank()) return;
  const int64_t bad = host_value<int64_t>(first_nonfinite_step_.sum());
  if (bad < 0) return;
  throw Error("step " + std::to_string(bad) + ": the loss or the gradient norm is not finite; training stopped "
              "(checkpoints already saved are kept, none is written after it). Lower optimizer.lr, check the data, or "
              "set training.on_nonfinite_loss=skip to skip such steps");
}

std::vector<Microbatch> TrainingRun::next_microbatches() {
  const TrainingConfig& training = plan.core.training;
  std::vector<Microbatch> microbatches;
  for (int64_t i = 0; i < accumulation_; ++i) {
    at::Tensor windows = loader ? loader->next_batch(training.local_batch_size).to(device)
                                : at::zeros({training.local_batch_size, training.seq_len + 1},
                                            at::TensorOptions().dtype(at::kLong).device(device));  // the dry run
    const int64_t length = windows.size(1) - 1;
    microbatches.push_back({windows.narrow(1, 0, length), windows.narrow(1, 1, length)});
  }
  return microbatches;
}

// Parameters, their gradients and the optimizer's state held by this rank.
int64_t TrainingRun::state_bytes() const {
  auto bytes_of = [](const at::Tensor& tensor) {
    return tensor.defined() ? static_cast<int64_t>(tensor.numel() * tensor.element_size()) : int64_t{0};
  };
  int64_t bytes = 0;
  for (const auto& param : parameters_) bytes += bytes_of(param) + bytes_of(param.grad());
  for (const auto& [name, tensor] : optimizer->state_tensors()) bytes += bytes_of(tensor);
  return bytes;
}

}  // namespace titan
