// Transformer::init_parameter: TorchTitan's gpt_oss init, each parameter
// drawn from its own CPU generator seeded by (seed, parameter name). Block
// weights, sinks and the experts' biases from a truncated normal of std
// 0.02 / sqrt(2 (layer + 1)); the attention's and the router's biases zero;
// the token embeddings N(0, 0.02). The MoE buffers start at zero.
#include <ATen/ATen.h>

#include "gpt_oss_model.h"
#include "titan/error.hpp"
#include "titan/param_init.hpp"

namespace titan::gpt_oss {

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  if (name == "tok_embeddings.weight") {
    at::NoGradGuard no_grad;
    values.normal_(0.0, 0.02, gen);
    return;
  }
  if (init_skeleton_parameter(name, values, gen)) return;  // output, every norm
  if (name_ends_with_any(name, {"attention.wq.bias", "attention.wk.bias", "attention.wv.bias", "attention.wo.bias",
                                "moe.router.gate.bias"})) {
    at::NoGradGuard no_grad;
    values.zero_();
  } else if (name_ends_with_any(name, {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                                       "attention.wo.weight", "attention.sinks", "moe.router.gate.weight",
                                       "moe.experts.mlp1_weight", "moe.experts.mlp1_bias", "moe.experts.mlp2_weight",
                                       "moe.experts.mlp2_bias"})) {
    trunc_normal(values, 0.0, depth_std(name, args_.depth_init), -2.0, 2.0, gen);
  } else {
    throw Error("gpt_oss: no init rule for parameter '" + name + "'");
  }
}

void Transformer::init_buffers() {
  Decoder::init_buffers();
  reset_router_buffers(*this, "gpt_oss");
}

}  // namespace titan::gpt_oss
