// training.cuda_graph: a step's forward and backward passes captured once
// into a CUDA graph and replayed every step after, so that the CPU stops
// launching kernels one by one (the debug model on an H100 is CPU-bound:
// ../shared/notes/gpu-facts.md). Gradient clipping, the optimizer and the
// metrics stay eager around it.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "titan/compat.hpp"
#include "titan/microbatch_runner.hpp"
#include "titan/training_step.hpp"

namespace titan {

class GraphedStep {
 public:
  // `parameters`: every trainable parameter, whose gradients the graph writes.
  // `required` (training.cuda_graph: true): a failed capture stops the run;
  // otherwise (auto) the run warns and goes on eagerly.
  GraphedStep(const c10::Device& device, int64_t warmup_steps, std::vector<at::Tensor> parameters, bool required);

  // The first warmup_steps calls run `forward_backward` eagerly on a side
  // stream; the next captures it on static copies of the microbatches; every
  // call from then on copies the microbatches in and replays. The capture
  // logs the device memory its graph keeps (its private pool's tensors). Returns the
  // loss as `forward_backward` does (after a replay, the graph's own tensor:
  // read it before the next call). Gradients are left in the parameters'
  // .grad as an eager step leaves them.
  at::Tensor run(const std::vector<Microbatch>& microbatches, const ForwardBackward& forward_backward);

  bool captured() const { return graph_ != nullptr; }

 private:
  void capture(const std::vector<Microbatch>& microbatches, const ForwardBackward& forward_backward);
  void copy_into_static(const std::vector<Microbatch>& microbatches);

  c10::Device device_;
  int64_t warmup_left_;
  bool required_;
  bool eager_ = false;  // a capture under auto failed: every step runs eagerly
  std::vector<at::Tensor> parameters_;
  std::unique_ptr<compat::DeviceGraph> graph_;
  std::vector<Microbatch> static_microbatches_;
  at::Tensor static_loss_;
  std::vector<at::Tensor> static_grads_;  // what the graph's backward writes
};

}  // namespace titan
