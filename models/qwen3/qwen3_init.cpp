// Transformer::init_parameter: TorchTitan's qwen3 init, each parameter drawn
// from its own CPU generator seeded by (seed, parameter name), so values do
// not depend on init order, on the device, or on which other layers exist.
// The MoE buffers (expert bias, token counts) start at zero in init_buffers.
#include <torch/torch.h>

#include <cmath>

#include "qwen3_model.h"
#include "titan/error.hpp"
#include "titan/param_init.hpp"
#include "titan/moe.hpp"

namespace titan::qwen3 {

namespace {

void draw(const std::string& name, at::Tensor& t, const Qwen3Args& args, at::Generator& gen) {
  auto depth_std = [&] {
    int64_t depth = args.depth_init ? block_index_of(name, "qwen3") + 1 : args.n_layers;
    return 0.02 / std::sqrt(2.0 * static_cast<double>(depth));
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
  } else if (name_ends_with(name, "norm.weight")) {  // attention_norm, ffn_norm, norm, q_norm, k_norm
    t.fill_(1.0);
  } else if (any_of({"attention.wq.weight", "attention.wk.weight", "attention.wv.weight", "feed_forward.w1.weight",
                     "moe.experts.w1", "moe.shared_experts.w1.weight"})) {
    trunc_normal(t, 0.0, 0.02, -2.0, 2.0, gen);
  } else if (any_of({"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight",
                     "moe.router.gate.weight", "moe.experts.w2", "moe.experts.w3", "moe.shared_experts.w2.weight",
                     "moe.shared_experts.w3.weight"})) {
    trunc_normal(t, 0.0, depth_std(), -2.0, 2.0, gen);
  } else {
    throw Error("qwen3: no init rule for parameter '" + name + "'");
  }
}

}  // namespace

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  draw(name, values, args_, gen);
}

void Transformer::init_buffers() {
  compute_rope_tables();
  reset_router_buffers(*this, "qwen3");
}

void Transformer::compute_rope_tables() {
  install_rope_tables(*this, freqs_cos_, freqs_sin_, rope_tables(args_), "qwen3");
}

}  // namespace titan::qwen3
