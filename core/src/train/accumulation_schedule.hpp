// The default Schedule: forward and backward over each microbatch in turn,
// gradients accumulated, the loss averaged over microbatches.
#pragma once
#include <optional>
#include <utility>

#include "titan/schedule.hpp"

namespace titan {

class AccumulationSchedule : public Schedule {
 public:
  AccumulationSchedule() = default;
  // Forward and loss under autocast to `dtype` on `device_type`
  // (training.mixed_precision_param with no parallelizer, as TorchTitan).
  AccumulationSchedule(c10::DeviceType device_type, c10::ScalarType dtype) : autocast_({device_type, dtype}) {}

  at::Tensor forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches, const LossFn& loss) override;

 private:
  std::optional<std::pair<c10::DeviceType, c10::ScalarType>> autocast_;
};

}  // namespace titan
