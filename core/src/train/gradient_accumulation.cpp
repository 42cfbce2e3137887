// Gradient accumulation over microbatches (no pipeline): the default
// MicrobatchRunner (titan/microbatch_runner.hpp).
#include "titan/microbatch_runner.hpp"

#include <ATen/ATen.h>

#include "titan/compat.hpp"
#include "titan/profile_range.hpp"

namespace titan {

namespace {

class GradientAccumulation : public MicrobatchRunner {
 public:
  explicit GradientAccumulation(std::optional<Autocast> autocast) : autocast_(autocast) {}
  at::Tensor forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches, const LossFn& loss) override;

 private:
  std::optional<Autocast> autocast_;
};

at::Tensor GradientAccumulation::forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches,
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
      if (autocast_) autocast.emplace(autocast_->device_type, autocast_->dtype);
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

}  // namespace

std::unique_ptr<MicrobatchRunner> gradient_accumulation(std::optional<Autocast> autocast_to) {
  return std::make_unique<GradientAccumulation>(autocast_to);
}

}  // namespace titan
