// The `dropout_llama3` test model: the real llama3, with dropout (p = 0.1,
// in training) on the output of every feed-forward's SwiGLU. A forward that
// draws random numbers, so checks can tell whether activation checkpointing
// replays the generator in its recompute (ac_rng.conformance.yaml).
#include <ATen/ATen.h>

#include <typeinfo>

#include "llama3_spec.h"
#include "titan/layers.hpp"
#include "titan/module_path.hpp"
#include "titan/plugin.hpp"

namespace {

class DropoutSwiGLU : public titan::SwiGLU {
 public:
  at::Tensor forward(const at::Tensor& gate, const at::Tensor& up) override {
    at::Tensor hidden = SwiGLU::forward(gate, up);
    return is_training() ? at::dropout(hidden, 0.1, /*train=*/true) : hidden;
  }
};

class DropoutLlama3 : public titan::llama3::Llama3Spec {
 public:
  explicit DropoutLlama3(Llama3Spec spec) : Llama3Spec(std::move(spec)) {}

  std::shared_ptr<titan::CausalLM> build(const c10::Device& device) const override {
    std::shared_ptr<titan::CausalLM> model = Llama3Spec::build(device);
    for (const auto& item : model->named_modules("", /*include_self=*/false)) {
      const torch::nn::Module& module = *item.value();
      if (typeid(module) == typeid(titan::SwiGLU)) {
        titan::swap_module(*model, item.key(), std::make_shared<DropoutSwiGLU>());
      }
    }
    return model;
  }
};

}  // namespace

TITAN_PLUGIN_OF(model, DropoutLlama3, "1.0", "llama3 with dropout in its feed-forward (test model)",
                titan::llama3::read_llama3_spec)
