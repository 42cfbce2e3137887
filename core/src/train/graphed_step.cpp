#include "graphed_step.hpp"

#include <ATen/ATen.h>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

GraphedStep::GraphedStep(const c10::Device& device, int64_t warmup_steps, std::vector<at::Tensor> parameters,
                         bool required)
    : device_(device), warmup_left_(warmup_steps), required_(required), parameters_(std::move(parameters)) {}

at::Tensor GraphedStep::run(const std::vector<Microbatch>& microbatches, const ForwardBackward& forward_backward) {
  if (eager_) return forward_backward(microbatches);
  if (warmup_left_ > 0) {
    --warmup_left_;
    at::Tensor loss;
    compat::run_on_side_stream(device_, [&] { loss = forward_backward(microbatches); });
    return loss;
  }
  // The capture's static inputs are clones of this step's batch already.
  if (!graph_) {
    try {
      capture(microbatches, forward_backward);
    } catch (const std::exception& error) {
      if (required_) throw;
      // Nothing ran in the capture: this step, and every one after, eagerly.
      graph_.reset();
      static_microbatches_.clear();
      static_grads_.clear();
      for (auto& param : parameters_) param.mutable_grad().reset();
      eager_ = true;
      spdlog::warn("training.cuda_graph: auto, the capture failed ({}); running eagerly from now on (set "
                   "training.cuda_graph=false to skip the attempt)",
                   error.what());
      return forward_backward(microbatches);
    }
  } else {
    copy_into_static(microbatches);
  }
  graph_->replay();
  // The optimizer's zero_grad drops .grad after every step; the graph keeps
  // writing the tensors it captured, so they are handed back each time.
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].mutable_grad() = static_grads_[i];
  return static_loss_;
}

void GraphedStep::capture(const std::vector<Microbatch>& microbatches, const ForwardBackward& forward_backward) {
  for (const auto& microbatch : microbatches) {
    // The weights are host numbers the capture bakes in: a run whose
    // weights change from step to step is not captured (cuda_graph_choice).
    Microbatch captured = microbatch;
    captured.inputs = microbatch.inputs.clone();
    captured.labels = microbatch.labels.clone();
    if (microbatch.document_positions.defined()) captured.document_positions = microbatch.document_positions.clone();
    static_microbatches_.push_back(std::move(captured));
  }
  for (auto& param : parameters_) {
    if (param.grad().defined()) {
      throw Error("training.cuda_graph: a gradient was left from the step before the capture; the optimizer's "
                  "zero_grad must drop gradients (set them to none) for the graph to own them");
    }
  }
  graph_ = std::make_unique<compat::DeviceGraph>(device_);
  const int64_t allocated_before = compat::device_memory_allocated(device_);
  graph_->capture([&] { static_loss_ = forward_backward(static_microbatches_); });
  const double kept_mib =
      static_cast<double>(compat::device_memory_allocated(device_) - allocated_before) / (1024.0 * 1024.0);
  for (auto& param : parameters_) {
    if (!param.grad().defined()) {
      throw Error("training.cuda_graph: the captured backward pass wrote no gradient for a trainable parameter " +
                  std::string("of shape ") + c10::str(param.sizes()) + "; the step cannot be replayed");
    }
    static_grads_.push_back(param.grad());
  }
  spdlog::info("training.cuda_graph: captured the forward and backward passes ({} microbatch(es) of {}; its "
               "memory pool keeps {:.1f} MiB: outputs, gradients and saved activations); replaying them from now on",
               static_microbatches_.size(), c10::str(static_microbatches_.front().inputs.sizes()), kept_mib);
}

void GraphedStep::copy_into_static(const std::vector<Microbatch>& microbatches) {
  if (microbatches.size() != static_microbatches_.size()) {
    throw Error("training.cuda_graph: a step of " + std::to_string(microbatches.size()) +
                " microbatches after a capture of " + std::to_string(static_microbatches_.size()));
  }
  for (size_t i = 0; i < microbatches.size(); ++i) {
    Microbatch& into = static_microbatches_[i];
    if (!microbatches[i].inputs.sizes().equals(into.inputs.sizes())) {
      throw Error("training.cuda_graph: batch shape " + c10::str(microbatches[i].inputs.sizes()) +
                  " differs from the captured " + c10::str(into.inputs.sizes()) +
                  "; a CUDA graph replays fixed shapes only");
    }
    into.inputs.copy_(microbatches[i].inputs, /*non_blocking=*/true);
    into.labels.copy_(microbatches[i].labels, /*non_blocking=*/true);
    if (into.document_positions.defined()) {
      into.document_positions.copy_(microbatches[i].document_positions, /*non_blocking=*/true);
    }
  }
}

}  // namespace titan
