// Gradient accumulation over microbatches (no pipeline).
#include "accumulation_schedule.hpp"

#include <torch/torch.h>

#include "titan/compat.hpp"
#include "titan/profile_range.hpp"

namespace titan {

at::Tensor AccumulationSchedule::forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches,
                                      const LossFn& loss) {
  at::Tensor total;
  const double mean = 1.0 / static_cast<double>(microbatches.size());
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const Microbatch& microbatch = microbatches[i];
    const double weight = loss_weight(microbatch, mean);
    model.set_gradient_sync(i + 1 == microbatches.size());
    at::Tensor value;
    {
      ProfileRange range("forward");
      std::optional<compat::AutocastScope> autocast;
      if (autocast_) autocast.emplace(autocast_->first, autocast_->second);
      at::Tensor logits = model.run(microbatch.inputs, microbatch.document_positions);
      value = weighted_loss(loss(logits, microbatch.labels), weight);
    }
    {
      ProfileRange range("backward");
      value.backward();
    }
    at::Tensor detached = value.detach();
    total = total.defined() ? total + detached : detached;
  }
  return total;
}

std::unique_ptr<Schedule> gradient_accumulation_schedule() { return std::make_unique<AccumulationSchedule>(); }

}  // namespace titan
