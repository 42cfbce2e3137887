// Transformer::init_parameter: TorchTitan's deepseek_v3 init, each parameter
// drawn from its own CPU generator seeded by (seed, parameter name), so
// values do not depend on init order, on the device, or on which other
// layers exist. Output projections (wo, w2, w3, the router's gate) get the
// depth-scaled std 0.02 / sqrt(2 (layer + 1)); every input projection of
// MLA std 0.02. The MoE buffers (expert bias, token counts) start at zero
// in init_buffers.
#include <torch/torch.h>

#include <cmath>

#include "deepseek_v3_model.h"
#include "titan/error.hpp"
#include "titan/moe.hpp"
#include "titan/param_init.hpp"

namespace titan::deepseek_v3 {

namespace {

void draw(const std::string& name, at::Tensor& t, const DeepSeekV3Args& args, at::Generator& gen) {
  auto depth_std = [&] {
    return 0.02 / std::sqrt(2.0 * static_cast<double>(block_index_of(name, "deepseek_v3") + 1));
  };
  auto any_of = [&](std::initializer_list<const char*> suffixes) {
    for (const char* suffix : suffixes) {
      if (name_ends_with(name, suffix)) return true;
    }
    return false;
  };
  if (name == "tok_embeddings.weight") {
    t.normal_(0.0, 1.0, gen);
  } else if (name == "output.weight") {
    double std = 1.0 / std::sqrt(static_cast<double>(args.dim));
    trunc_normal(t, 0.0, std, -3 * std, 3 * std, gen);
  } else if (name_ends_with(name, "norm.weight")) {  // attention_norm, ffn_norm, norm, kv_norm, q_norm
    t.fill_(1.0);
  } else if (any_of({"attention.wq.weight", "attention.wq_a.weight", "attention.wq_b.weight",
                     "attention.wkv_a.weight", "attention.wkv_b.weight", "feed_forward.w1.weight",
                     "moe.experts.w1", "moe.shared_experts.w1.weight"})) {
    trunc_normal(t, 0.0, 0.02, -2.0, 2.0, gen);
  } else if (any_of({"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight",
                     "moe.router.gate.weight", "moe.experts.w2", "moe.experts.w3", "moe.shared_experts.w2.weight",
                     "moe.shared_experts.w3.weight"})) {
    trunc_normal(t, 0.0, depth_std(), -2.0, 2.0, gen);
  } else {
    throw Error("deepseek_v3: no init rule for parameter '" + name + "'");
  }
}

}  // namespace

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  draw(name, values, args_, gen);
}

void Transformer::init_buffers() {
  compute_rope_tables();
  reset_router_buffers(*this, "deepseek_v3");
}

void Transformer::compute_rope_tables() {
  install_rope_tables(*this, freqs_cos_, freqs_sin_, rope_tables(args_), "deepseek_v3");
}

}  // namespace titan::deepseek_v3
