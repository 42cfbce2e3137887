// The `lion` plugin's descriptor and factory: reads and checks the YAML
// `optimizer:` section, then builds Lion over the local parameters.
#include <spdlog/spdlog.h>

#include <cmath>
#include <sstream>

#include "lion.h"
#include "titan/plugin.hpp"

namespace {

struct LionConfig {
  double lr = 1e-4;  // Lion wants a 3-10x smaller lr than AdamW (its steps have unit size per element)
  lion::LionOptions options;
};

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads every option (so unknown keys are caught and `titan plugins inspect
// lion` lists them), then checks their ranges.
LionConfig read_config(const titan::ConfigNode& node) {
  LionConfig config;
  lion::LionOptions& o = config.options;
  config.lr = node.get<double>("lr", config.lr, "peak learning rate (the LR schedule multiplies it)");
  o.beta1 = node.get<double>("beta1", o.beta1, "weight of the momentum in the update's sign");
  o.beta2 = node.get<double>("beta2", o.beta2, "decay rate of the momentum");
  o.weight_decay = node.get<double>("weight_decay", o.weight_decay,
                                    "decoupled weight decay: each step p *= 1 - lr * weight_decay");
  auto check = [&](const char* key, double value, bool ok, const char* expected) {
    if (!ok) node.fail(key, std::string("expected ") + expected + ", got " + number_text(value));
  };
  check("lr", config.lr, std::isfinite(config.lr) && config.lr >= 0, "a finite number >= 0");
  check("beta1", o.beta1, o.beta1 >= 0 && o.beta1 <= 1, "a number in [0, 1]");
  check("beta2", o.beta2, o.beta2 >= 0 && o.beta2 <= 1, "a number in [0, 1]");
  check("weight_decay", o.weight_decay, std::isfinite(o.weight_decay) && o.weight_decay >= 0,
        "a finite number >= 0");
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

void register_lion(titan::PluginRegistrar& registrar) {
  registrar.optimizer([](const titan::PluginContext& context) {
    return std::make_unique<LionFactory>(read_config(context.options));
  });
}

}  // namespace

TITAN_PLUGIN("lion", "1.0", titan::kind_optimizer,
             "Lion: sign of interpolated momentum, decoupled weight decay (Chen et al. 2023)", register_lion)
