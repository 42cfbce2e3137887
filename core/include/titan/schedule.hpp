// A Schedule runs one training step's forward and backward passes over the
// step's microbatches, accumulating their gradients: plain gradient
// accumulation by default, or a `schedule` plugin's. A schedule plugin never
// drives pipeline stages: with a pipeline, core's pipeline executor
// (pipeline_program.hpp) runs the step and a schedule plugin is refused.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "titan/model.hpp"

namespace titan {

struct Microbatch {
  at::Tensor inputs;  // [batch, seq] int64
  at::Tensor labels;  // [batch, seq] int64
  // Each input token's position within its document ([batch, seq] int64);
  // undefined unless model.attn_mask_type is block_causal (CausalLM::run).
  at::Tensor document_positions;
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  // Accumulates gradients of mean(loss over microbatches) into the params;
  // returns that mean loss as a 0-dim tensor (detached). Gradient sync
  // (CausalLM::set_gradient_sync) should be on for the last microbatch only,
  // so data parallelism reduces once per step, not once per microbatch.
  // (Named for what it does: "step" is the trainer's whole step, of which
  // this is the forward and backward part.)
  virtual at::Tensor forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches,
                                      const LossFn& loss) = 0;
};

// The trainer's default: forward and backward over each microbatch in turn,
// gradients accumulated, the loss averaged over the microbatches.
std::unique_ptr<Schedule> gradient_accumulation_schedule();

}  // namespace titan
