// Transformer::init_parameter: TorchTitan's init scheme (the skeleton's
// parameters by core's decoder, the blocks' here), each parameter drawn
// from its own CPU generator seeded by (seed, parameter name), so values do
// not depend on init order, on the device, or on which other layers exist.
#include <ATen/ATen.h>

#include "llama3_model.h"
#include "titan/error.hpp"
#include "titan/param_init.hpp"

namespace titan::llama3 {

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  if (init_skeleton_parameter(name, values, gen)) return;
  if (name_ends_with_any(name, {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                                "feed_forward.w1.weight"})) {
    trunc_normal(values, 0.0, 0.02, -2.0, 2.0, gen);
  } else if (name_ends_with_any(name, {"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"})) {
    trunc_normal(values, 0.0, depth_std(name, args_.depth_init), -2.0, 2.0, gen);
  } else {
    throw Error("llama3: no init rule for parameter '" + name + "'");
  }
}

}  // namespace titan::llama3
