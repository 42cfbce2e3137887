// Gradient accumulation over microbatches (no pipeline).
#include "accumulation_schedule.hpp"

#include <torch/torch.h>

namespace titan {

at::Tensor AccumulationSchedule::step(CausalLM& model, const std::vector<Microbatch>& microbatches,
                                      const LossFn& loss) {
  at::Tensor total;
  const double scale = 1.0 / static_cast<double>(microbatches.size());
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const Microbatch& microbatch = microbatches[i];
    model.set_gradient_sync(i + 1 == microbatches.size());
    at::Tensor logits = model.run(microbatch.inputs);
    at::Tensor value = loss(logits, microbatch.labels) * scale;
    value.backward();
    at::Tensor detached = value.detach();
    total = total.defined() ? total + detached : detached;
  }
  return total;
}

}  // namespace titan
