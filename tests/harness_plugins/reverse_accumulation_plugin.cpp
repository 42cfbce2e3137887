// A correct schedule unlike the trainer's default: gradient accumulation
// over the microbatches in reverse order (titan-conformance must pass it).
// Built a second time with TITAN_TEST_FORGET_MICROBATCH_SCALE as a mutant
// that sums the microbatch losses instead of averaging them (must fail).
#include <ATen/ATen.h>

#include "titan/plugin.hpp"
#include "titan/schedule.hpp"

namespace {

class ReverseAccumulation : public titan::Schedule {
 public:
  at::Tensor forward_backward(titan::CausalLM& model, const std::vector<titan::Microbatch>& microbatches,
                  const titan::LossFn& loss) override {
#ifdef TITAN_TEST_FORGET_MICROBATCH_SCALE
    const double scale = 1.0;  // the bug: no 1/N
#else
    const double scale = 1.0 / static_cast<double>(microbatches.size());
#endif
    at::Tensor total = at::zeros({}, at::kDouble);
    for (size_t done = 0; done < microbatches.size(); ++done) {
      const titan::Microbatch& microbatch = microbatches[microbatches.size() - 1 - done];
      model.set_gradient_sync(done + 1 == microbatches.size());
      at::Tensor value = loss(model.run(microbatch.inputs), microbatch.labels) * scale;
      value.backward();
      total += value.detach().to(at::kDouble);
    }
    return total.to(at::kFloat);
  }
};

}  // namespace

TITAN_PLUGIN_OF(schedule, ReverseAccumulation, "1.0",
                "gradient accumulation in reverse microbatch order (conformance test)")
