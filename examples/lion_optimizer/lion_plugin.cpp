// The `lion` plugin's descriptor and factory: reads and checks the YAML
// `optimizer:` section, then builds Lion over the local parameters.
#include <spdlog/spdlog.h>

#include "lion.h"
#include "titan/plugin.hpp"

namespace {

struct LionConfig {
  double lr = 1e-4;  // Lion wants a 3-10x smaller lr than AdamW (its steps have unit size per element)
  lion::LionOptions options;
};

// Reads every option (so unknown keys are caught and `titan plugins inspect
// lion` lists them), each checked against its range.
LionConfig read_config(const titan::ConfigNode& node) {
  using titan::NumberRange;
  LionConfig config;
  lion::LionOptions& o = config.options;
  config.lr = node.number("lr", config.lr, NumberRange::at_least(0),
                          "peak learning rate (the LR schedule multiplies it)");
  o.beta1 = node.number("beta1", o.beta1, NumberRange::closed(0, 1), "weight of the momentum in the update's sign");
  o.beta2 = node.number("beta2", o.beta2, NumberRange::closed(0, 1), "decay rate of the momentum");
  o.weight_decay = node.number("weight_decay", o.weight_decay, NumberRange::at_least(0),
                               "decoupled weight decay: each step p *= 1 - lr * weight_decay");
  return config;
}

class LionFactory : public titan::OptimizerFactory {
 public:
  explicit LionFactory(LionConfig config) : config_(config) {}
  double base_lr() const override { return config_.lr; }
  std::unique_ptr<titan::Optimizer> build(const std::vector<titan::NamedParameter>& params) const override {
    const auto& o = config_.options;
    spdlog::info("lion: {} parameters, lr {:g}, beta1 {:g}, beta2 {:g}, weight_decay {:g}", params.size(),
                 config_.lr, o.beta1, o.beta2, o.weight_decay);
    return std::make_unique<lion::Lion>(params, o);
  }

 private:
  LionConfig config_;
};

}  // namespace

TITAN_PLUGIN_OF(optimizer, LionFactory, "1.0",
                "Lion: sign of interpolated momentum, decoupled weight decay (Chen et al. 2023)", read_config)
