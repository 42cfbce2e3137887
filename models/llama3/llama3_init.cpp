// Transformer::init_parameter: TorchTitan's init scheme, each parameter drawn
// from its own CPU generator seeded by (seed, parameter name), so values do
// not depend on init order, on the device, or on which other layers exist.
#include <torch/torch.h>

#include <cmath>

#include "llama3_model.h"
#include "titan/error.hpp"
#include "titan/param_init.hpp"

namespace titan::llama3 {

namespace {

// Fills one fp32 CPU tensor following TorchTitan's rule for this parameter.
void draw(const std::string& name, at::Tensor& t, const Llama3Args& args, at::Generator& gen) {
  if (name == "tok_embeddings.weight") {
    t.normal_(0.0, 1.0, gen);
  } else if (name == "output.weight") {
    double std = 1.0 / std::sqrt(static_cast<double>(args.dim));
    trunc_normal(t, 0.0, std, -3 * std, 3 * std, gen);
  } else if (name_ends_with(name, "norm.weight")) {
    t.fill_(1.0);
  } else if (name_ends_with(name, "attention.wq.weight") || name_ends_with(name, "attention.wk.weight") ||
             name_ends_with(name, "attention.wv.weight") || name_ends_with(name, "feed_forward.w1.weight")) {
    trunc_normal(t, 0.0, 0.02, -2.0, 2.0, gen);
  } else if (name_ends_with(name, "attention.wo.weight") || name_ends_with(name, "feed_forward.w2.weight") ||
             name_ends_with(name, "feed_forward.w3.weight")) {
    int64_t depth = args.depth_init ? block_index_of(name, "llama3") + 1 : args.n_layers;
    trunc_normal(t, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(depth)), -2.0, 2.0, gen);
  } else {
    throw Error("llama3: no init rule for parameter '" + name + "'");
  }
}

}  // namespace

void Transformer::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  at::Generator gen = parameter_generator(seed, name);
  draw(name, values, args_, gen);
}

void Transformer::init_buffers() { compute_rope_tables(); }

void Transformer::compute_rope_tables() {
  install_rope_tables(*this, freqs_cos_, freqs_sin_, rope_tables(args_), "llama3");
}

}  // namespace titan::llama3
