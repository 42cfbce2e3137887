// Transformer::init_parameter: TorchTitan's qwen3 init, each parameter drawn
// from its own CPU generator seeded by (seed, parameter name), so values do
// not depend on init order, on the device, or on which other layers exist.
// The MoE buffers (expert bias, token counts) start at zero in init_buffers.
#include <ATen/ATen.h>

#include "qwen3_model.h"
#include "titan/error.hpp"
#include "titan/param_init.hpp"
#include "titan/moe.hpp"

namespace titan::qwen3 {

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  if (init_skeleton_parameter(name, values, gen)) return;  // embeddings, output, every norm (q_norm, k_norm too)
  if (name_ends_with_any(name, {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                                "feed_forward.w1.weight", "moe.experts.w1", "moe.shared_experts.w1.weight"})) {
    trunc_normal(values, 0.0, 0.02, -2.0, 2.0, gen);
  } else if (name_ends_with_any(name, {"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight",
                                       "moe.router.gate.weight", "moe.experts.w2", "moe.experts.w3",
                                       "moe.shared_experts.w2.weight", "moe.shared_experts.w3.weight"})) {
    trunc_normal(values, 0.0, depth_std(name, args_.depth_init), -2.0, 2.0, gen);
  } else {
    throw Error("qwen3: no init rule for parameter '" + name + "'");
  }
}

void Transformer::init_buffers() {
  Decoder::init_buffers();
  reset_router_buffers(*this, "qwen3");
}

}  // namespace titan::qwen3
