// A correct schedule unlike the trainer's default: gradient accumulation
// over the microbatches in reverse order (titan-conformance must pass it).
// Built a second time with TITAN_TEST_FORGET_MICROBATCH_SCALE as a mutant
// that sums the microbatch losses instead of weighting them, and a third
// with TITAN_TEST_MEAN_OF_MEANS as one that averages the microbatch means
// whatever their labels that carry loss (both must fail).
#include <ATen/ATen.h>

#include "titan/plugin.hpp"
#include "titan/microbatch_runner.hpp"

namespace {

class ReverseAccumulation : public titan::MicrobatchRunner {
 public:
  at::Tensor forward_backward(titan::CausalLM& model, const std::vector<titan::Microbatch>& microbatches,
                  const titan::LossFn& loss) override {
    at::Tensor total = at::zeros({}, at::kDouble);
    for (size_t done = 0; done < microbatches.size(); ++done) {
      const titan::Microbatch& microbatch = microbatches[microbatches.size() - 1 - done];
#if defined(TITAN_TEST_FORGET_MICROBATCH_SCALE)
      const double weight = 1.0;  // the bug: neither the microbatch's share nor 1/N
#elif defined(TITAN_TEST_MEAN_OF_MEANS)
      const double weight = 1.0 / static_cast<double>(microbatches.size());  // the bug: blind to ignored labels
#else
      const double weight = titan::loss_weight(microbatch, 1.0 / static_cast<double>(microbatches.size()));
#endif
      model.set_gradient_sync(done + 1 == microbatches.size());
      at::Tensor value = titan::weighted_loss(loss(model.run(microbatch.inputs), microbatch.labels), weight);
      value.backward();
      total += value.detach().to(at::kDouble);
    }
    return total.to(at::kFloat);
  }
};

}  // namespace

TITAN_PLUGIN_OF(microbatch_runner, ReverseAccumulation, "1.0",
                "gradient accumulation in reverse microbatch order (conformance test)")
