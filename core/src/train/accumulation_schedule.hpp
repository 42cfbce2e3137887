// The default Schedule: forward and backward over each microbatch in turn,
// gradients accumulated, the loss averaged over microbatches.
#pragma once
#include "titan/schedule.hpp"

namespace titan {

class AccumulationSchedule : public Schedule {
 public:
  at::Tensor forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches, const LossFn& loss) override;
};

}  // namespace titan
