// The `adamw` plugin: reads the `optimizer:` section (TorchTitan's knob
// names and defaults), validates it, and builds AdamW over local parameters.
#include "adamw.h"
#include "titan/plugin.hpp"

namespace {

using titan::adamw::AdamW;
using titan::adamw::AdamWOptions;

struct AdamWConfig {
  double lr = 8e-4;
  AdamWOptions options;
};

// Every option with the ranges torch.optim.AdamW checks.
AdamWConfig read_config(const titan::ConfigNode& node) {
  using titan::NumberRange;
  using Implementation = AdamWOptions::Implementation;
  AdamWConfig config;
  AdamWOptions& o = config.options;
  config.lr = node.number("lr", config.lr, NumberRange::at_least(0),
                          "peak learning rate (the LR schedule multiplies it)");
  o.eps = node.number("eps", o.eps, NumberRange::at_least(0), "term added to the denominator for numerical stability");
  o.weight_decay = node.number("weight_decay", o.weight_decay, NumberRange::at_least(0),
                               "decoupled weight decay: each step p *= 1 - lr * weight_decay");
  o.beta1 = node.number("beta1", o.beta1, NumberRange::half_open(0, 1),
                        "decay rate of the first moment (mean of gradients)");
  o.beta2 = node.number("beta2", o.beta2, NumberRange::half_open(0, 1),
                        "decay rate of the second moment (mean of squared gradients)");
  o.implementation = node.choice(
      "implementation", Implementation::foreach,
      {{"foreach", Implementation::foreach}, {"for-loop", Implementation::for_loop}, {"fused", Implementation::fused}},
      "foreach: ATen _foreach_* ops over each (device, dtype) group; for-loop: one tensor at a time; "
      "fused: ATen's _fused_adamw_ kernel (TorchTitan's default; within 1e-6 of the others)");
  return config;
}

class AdamWFactory : public titan::OptimizerFactory {
 public:
  explicit AdamWFactory(AdamWConfig config) : config_(config) {}
  double base_lr() const override { return config_.lr; }
  std::unique_ptr<titan::Optimizer> build(const std::vector<titan::NamedParameter>& params) const override {
    return std::make_unique<AdamW>(params, config_.options);
  }

 private:
  AdamWConfig config_;
};

}  // namespace

TITAN_PLUGIN_OF(optimizer, AdamWFactory, "1.0",
                "AdamW with decoupled weight decay, as torch.optim.AdamW (foreach or for-loop)", read_config)
