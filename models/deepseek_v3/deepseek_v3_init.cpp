// Transformer::init_parameter: TorchTitan's deepseek_v3 init, each parameter
// drawn from its own CPU generator seeded by (seed, parameter name), so
// values do not depend on init order, on the device, or on which other
// layers exist. Output projections (wo, w2, w3, the router's gate) get the
// depth-scaled std 0.02 / sqrt(2 (layer + 1)); every input projection of
// MLA std 0.02 (and multi-token prediction's eh_proj). The MoE buffers (expert bias, token counts) start at zero
// in init_buffers.
#include <ATen/ATen.h>

#include <cmath>

#include "deepseek_v3_model.h"
#include "titan/error.hpp"
#include "titan/moe.hpp"
#include "titan/param_init.hpp"

namespace titan::deepseek_v3 {

double Transformer::output_std(const std::string& name) const {
  // A multi-token prediction block continues the main blocks' depth.
  const std::string mtp = "mtp_layers.";
  if (name.rfind(mtp, 0) != 0) return depth_std(name, /*depth_init=*/true);
  const int64_t depth = args_.n_layers + std::stoll(name.substr(mtp.size(), name.find('.', mtp.size()) - mtp.size())) + 1;
  return 0.02 / std::sqrt(2.0 * static_cast<double>(depth));
}

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  if (init_skeleton_parameter(name, values, gen)) return;  // embeddings, output, every norm (kv_norm, q_norm too)
  if (name_ends_with_any(name, {"attention.wq.weight", "attention.wq_a.weight", "attention.wq_b.weight",
                                "attention.wkv_a.weight", "attention.wkv_b.weight", "feed_forward.w1.weight",
                                "moe.experts.w1", "moe.shared_experts.w1.weight"})) {
    trunc_normal(values, 0.0, 0.02, -2.0, 2.0, gen);
  } else if (name_ends_with_any(name, {"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight",
                                       "moe.router.gate.weight", "moe.experts.w2", "moe.experts.w3",
                                       "moe.shared_experts.w2.weight", "moe.shared_experts.w3.weight"})) {
    trunc_normal(values, 0.0, output_std(name), -2.0, 2.0, gen);
  } else if (name_ends_with(name, "eh_proj.weight")) {
    trunc_normal(values, 0.0, 0.02, -2.0, 2.0, gen);
  } else {
    throw Error("deepseek_v3: no init rule for parameter '" + name + "'");
  }
}

void Transformer::init_buffers() {
  Decoder::init_buffers();
  reset_router_buffers(*this, "deepseek_v3");
}

}  // namespace titan::deepseek_v3
