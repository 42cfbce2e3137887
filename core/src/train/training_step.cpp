// run_training_step: the step's sequence, shared by the trainer
// (TrainingRun::step) and titan-conformance.
#include "titan/training_step.hpp"

#include <ATen/ATen.h>

#include "model/tensor_bytes.hpp"
#include "titan/comm.hpp"
#include "titan/host_value.hpp"
#include "titan/profile_range.hpp"

namespace titan {

JobLossTensors loss_over_job(const DeviceMesh* mesh, const at::Tensor& local_loss, bool with_max) {
  at::Tensor loss = local_loss.detach().to(at::kDouble).reshape({1});
  if (mesh && mesh->size("pp") > 1) mesh->group("pp").all_reduce(loss, ReduceOp::sum);
  at::Tensor largest = with_max ? loss.clone() : loss;
  if (mesh && mesh->size("dp_cp") > 1) {
    mesh->group("dp_cp").all_reduce(loss, ReduceOp::avg);
    if (with_max) mesh->group("dp_cp").all_reduce(largest, ReduceOp::max);
  }
  return {loss, largest};
}

NormTensorReduceFn norm_reduce_over(const DeviceMesh* mesh) {
  if (!mesh) return {};
  return [mesh](at::Tensor& partial, NormReduceOp op) {
    at::Tensor value = partial.reshape({1});
    mesh->group("world").all_reduce(value, op == NormReduceOp::max ? ReduceOp::max : ReduceOp::sum);
    partial = value.reshape({});
  };
}

std::vector<double> norm_weights_over(const DeviceMesh* mesh, const CausalLM& model,
                                      const std::vector<std::string>& names) {
  if (!mesh) return {};
  std::vector<double> weights;
  for (const auto& name : names) {
    const TensorLayout* layout = model.layout(name);
    const double copies = layout ? static_cast<double>(layout->replication(*mesh)) : mesh->world_size();
    weights.push_back(1.0 / copies);
  }
  return weights;
}

StepResult run_training_step(const StepParts& parts, const std::vector<Microbatch>& microbatches,
                             const StepOptions& options) {
  CausalLM& model = *parts.model;
  StepObserver fallback;
  StepObserver& observer = options.observer ? *options.observer : fallback;
  const ForwardBackward forward_backward = [&](const std::vector<Microbatch>& batch) {
    ProfileRange range("forward_backward");
    return parts.runner->forward_backward(model, batch, model.training_loss());
  };
  const at::Tensor local_loss = options.runner ? options.runner(microbatches, forward_backward)
                                               : forward_backward(microbatches);
  model.finalize_gradients();
  observer.gradients_ready(model);

  StepResult result;
  const JobLossTensors job_loss = loss_over_job(parts.mesh, local_loss);
  result.loss = observer.loss_seen(job_loss.average);
  // On the loss's device, where the step's numbers are kept together.
  result.grad_norm = clip_grad_norm_on_device(parts.parameters, parts.max_norm, 2.0, norm_reduce_over(parts.mesh),
                                              parts.norm_weights)
                         .reshape({1})
                         .to(result.loss.device());
  // A NaN loss (a test hook's) shows in the max too.
  result.max_loss = at::where(at::isfinite(result.loss), job_loss.max, result.loss);
  // The model's own work before the optimizer (TorchTitan's optimizer
  // pre-step hooks: MoE load balancing), with its metrics.
  for (const StepHook* hook : model.step_hooks()) {
    if (!hook->before_optimizer) continue;
    result.model_metrics.merge(hook->before_optimizer({parts.mesh, options.log_step, options.sum_over_replica_groups}));
  }
  result.finite = at::isfinite(result.loss + result.grad_norm);  // ops meta tensors have too (the dry run)
  if (options.skip_nonfinite && !host_value<bool>(result.finite.all())) {
    result.optimizer_skipped = true;
  } else if (!observer.should_commit()) {
    result.optimizer_skipped = result.discarded = true;
  } else {
    observer.before_optimizer();
    ProfileRange range("optimizer");
    CallSite site("optimizer");
    parts.optimizer->step(options.lr);
  }
  if (options.count_state_bytes) {
    for (const auto& param : parts.parameters) result.state_bytes += tensor_bytes(param) + tensor_bytes(param.grad());
    for (const auto& [name, tensor] : parts.optimizer->state_tensors()) result.state_bytes += tensor_bytes(tensor);
  }
  parts.optimizer->zero_grad();
  return result;
}

}  // namespace titan
