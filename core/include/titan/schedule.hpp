// A Schedule runs one training step's forward and backward passes over
// microbatches (and, for pipelines, stages). The default schedule is
// plain gradient accumulation.
#pragma once
#include <functional>
#include <vector>

#include "titan/model.hpp"

namespace titan {

struct Microbatch {
  at::Tensor inputs;  // [batch, seq] int64
  at::Tensor labels;  // [batch, seq] int64
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  // Accumulates gradients of mean(loss over microbatches) into the params;
  // returns that mean loss as a 0-dim tensor (detached).
  virtual at::Tensor step(CausalLM& model, const std::vector<Microbatch>& microbatches,
                          const LossFn& loss) = 0;
};

}  // namespace titan
