// The `adamw` plugin: reads the `optimizer:` section (TorchTitan's knob
// names and defaults), validates it, and builds AdamW over local parameters.
#include <cmath>
#include <sstream>

#include "adamw.h"
#include "titan/plugin.hpp"

namespace {

using titan::adamw::AdamW;
using titan::adamw::AdamWOptions;

struct AdamWConfig {
  double lr = 8e-4;
  AdamWOptions options;
};

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads every option (so unknown keys are caught and `inspect` lists them),
// then checks the ranges torch.optim.AdamW checks.
AdamWConfig read_config(const titan::ConfigNode& node) {
  AdamWConfig config;
  AdamWOptions& o = config.options;
  config.lr = node.get<double>("lr", config.lr, "peak learning rate (the LR schedule multiplies it)");
  o.eps = node.get<double>("eps", o.eps, "term added to the denominator for numerical stability");
  o.weight_decay = node.get<double>("weight_decay", o.weight_decay,
                                    "decoupled weight decay: each step p *= 1 - lr * weight_decay");
  o.beta1 = node.get<double>("beta1", o.beta1, "decay rate of the first moment (mean of gradients)");
  o.beta2 = node.get<double>("beta2", o.beta2, "decay rate of the second moment (mean of squared gradients)");
  std::string implementation =
      node.choice("implementation", "foreach", {"foreach", "for-loop", "fused"},
                  "foreach: ATen _foreach_* ops over each (device, dtype) group; for-loop: one tensor at a time; "
                  "fused: ATen's _fused_adamw_ kernel (TorchTitan's default; within 1e-6 of the others)");
  o.implementation = implementation == "fused"      ? AdamWOptions::Implementation::fused
                     : implementation == "for-loop" ? AdamWOptions::Implementation::for_loop
                                                    : AdamWOptions::Implementation::foreach;

  auto check = [&](const char* key, double value, bool ok, const char* expected) {
    if (!ok) node.fail(key, std::string("expected ") + expected + ", got " + number_text(value));
  };
  check("lr", config.lr, std::isfinite(config.lr) && config.lr >= 0, "a finite number >= 0");
  check("eps", o.eps, std::isfinite(o.eps) && o.eps >= 0, "a finite number >= 0");
  check("weight_decay", o.weight_decay, std::isfinite(o.weight_decay) && o.weight_decay >= 0,
        "a finite number >= 0");
  check("beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "a number in [0, 1)");
  check("beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "a number in [0, 1)");
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

void register_adamw(titan::PluginRegistrar& registrar) {
  registrar.optimizer([](const titan::PluginContext& context) {
    return std::make_unique<AdamWFactory>(read_config(context.options));
  });
}

}  // namespace

TITAN_PLUGIN("adamw", "1.0", titan::kind_optimizer,
             "AdamW with decoupled weight decay, as torch.optim.AdamW (foreach or for-loop)", register_adamw)
