// A correct schedule unlike the trainer's default: gradient accumulation
// over the microbatches in reverse order (titan-conformance must pass it).
// Its mutants: `unscaled_accumulation` sums the microbatch losses instead of
// weighting them, and `mean_of_means_accumulation` averages the microbatch
// means whatever their labels that carry loss (both must fail).
#include <ATen/ATen.h>

#include "test_plugin.hpp"
#include "titan/microbatch_runner.hpp"

namespace {

enum class Weighting { by_loss_labels, none, mean_of_means };

template <Weighting kWeighting>
class ReverseAccumulation : public titan::MicrobatchRunner {
 public:
  at::Tensor forward_backward(titan::CausalLM& model, const std::vector<titan::Microbatch>& microbatches,
                  const titan::LossFn& loss) override {
    at::Tensor total = at::zeros({}, at::kDouble);
    for (size_t done = 0; done < microbatches.size(); ++done) {
      const titan::Microbatch& microbatch = microbatches[microbatches.size() - 1 - done];
      const double mean_weight = 1.0 / static_cast<double>(microbatches.size());
      const double weight = kWeighting == Weighting::none            ? 1.0  // the bug: neither its share nor 1/N
                            : kWeighting == Weighting::mean_of_means ? mean_weight  // the bug: blind to ignored labels
                                                                     : titan::loss_weight(microbatch, mean_weight);
      model.set_gradient_sync(done + 1 == microbatches.size());
      at::Tensor value = titan::weighted_loss(loss(model.run(microbatch.inputs), microbatch.labels), weight);
      value.backward();
      total += value.detach().to(at::kDouble);
    }
    return total.to(at::kFloat);
  }
};

}  // namespace

TITAN_TEST_PLUGIN_OF(reverse_accumulation, microbatch_runner, ReverseAccumulation<Weighting::by_loss_labels>,
                     "1.0", "gradient accumulation in reverse microbatch order (conformance test)")
TITAN_TEST_PLUGIN_OF(unscaled_accumulation, microbatch_runner, ReverseAccumulation<Weighting::none>, "1.0",
                     "reverse accumulation that forgets the microbatch scale (conformance test)")
TITAN_TEST_PLUGIN_OF(mean_of_means_accumulation, microbatch_runner, ReverseAccumulation<Weighting::mean_of_means>,
                     "1.0", "reverse accumulation that averages the microbatch means (conformance test)")
