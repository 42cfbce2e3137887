// The `muon` plugin: reads the `optimizer:` section (torch.optim.Muon's
// names and defaults, and AdamW's for the parameters Muon leaves out),
// validates it, and builds Muon over the local parameters and their layouts.
#include "muon.h"
#include "titan/plugin.hpp"

namespace {

using titan::muon::Muon;
using titan::muon::MuonOptions;

struct MuonConfig {
  double lr = 0.02;
  MuonOptions options;
};

MuonConfig read_config(const titan::ConfigNode& node) {
  using titan::NumberRange;
  MuonConfig config;
  MuonOptions& o = config.options;
  config.lr = node.number("lr", config.lr, NumberRange::at_least(0),
                          "peak learning rate of both rules (the LR schedule multiplies it)");
  o.momentum = node.number("momentum", o.momentum, NumberRange::at_least(0), "momentum of the matrices' update");
  o.nesterov = node.get<bool>("nesterov", o.nesterov, "Nesterov momentum (torch.optim.Muon's default)");
  o.weight_decay = node.number("weight_decay", o.weight_decay, NumberRange::at_least(0),
                               "the matrices' decoupled weight decay: p *= 1 - lr * weight_decay");
  std::vector<double> coefficients = node.get<std::vector<double>>(
      "ns_coefficients", {o.ns_coefficients[0], o.ns_coefficients[1], o.ns_coefficients[2]},
      "a, b, c of the Newton-Schulz step X <- a X + (b A + c A^2) X, A = X X^T");
  if (coefficients.size() != 3) {
    node.fail("ns_coefficients", "expected 3 numbers [a, b, c], got " + std::to_string(coefficients.size()));
  }
  o.ns_coefficients = {coefficients[0], coefficients[1], coefficients[2]};
  o.ns_steps = node.get<int64_t>("ns_steps", o.ns_steps, "Newton-Schulz iterations, 1 to 99 (as torch.optim.Muon)");
  if (o.ns_steps < 1 || o.ns_steps >= 100) {
    node.fail("ns_steps", "expected an integer from 1 to 99, got " + std::to_string(o.ns_steps));
  }
  o.eps = node.number("eps", o.eps, NumberRange::above(0), "floor of the norm the iteration starts by dividing by");
  o.adjust_lr = node.choice("adjust_lr_fn", MuonOptions::AdjustLr::original,
                            {{"original", MuonOptions::AdjustLr::original},
                             {"match_rms_adamw", MuonOptions::AdjustLr::match_rms_adamw},
                             {"none", MuonOptions::AdjustLr::none}},
                            "scale of a matrix [A, B]'s update: original sqrt(max(1, A/B)) (Keller Jordan's), "
                            "match_rms_adamw 0.2 sqrt(max(A, B)) (Moonshot's: AdamW's lr and decay carry over)");
  o.ns_dtype = node.choice("ns_dtype", c10::kBFloat16, {{"bfloat16", c10::kBFloat16}, {"float32", c10::kFloat}},
                           "dtype of the Newton-Schulz iteration (bfloat16 as torch.optim.Muon)");
  o.adamw_params = node.get<std::vector<std::string>>(
      "adamw_params", o.adamw_params,
      "parameters whose name contains one of these take AdamW (as does every parameter that is not 2-D)");
  o.adamw_beta1 = node.number("adamw_beta1", o.adamw_beta1, NumberRange::half_open(0, 1), "AdamW's first-moment decay");
  o.adamw_beta2 = node.number("adamw_beta2", o.adamw_beta2, NumberRange::half_open(0, 1),
                              "AdamW's second-moment decay");
  o.adamw_eps = node.number("adamw_eps", o.adamw_eps, NumberRange::at_least(0), "AdamW's denominator term");
  o.adamw_weight_decay = node.number("adamw_weight_decay", o.weight_decay, NumberRange::at_least(0),
                                     "AdamW's decoupled weight decay (default: weight_decay)");
  return config;
}

class MuonFactory : public titan::OptimizerFactory {
 public:
  explicit MuonFactory(MuonConfig config) : config_(config) {}
  double base_lr() const override { return config_.lr; }
  std::unique_ptr<titan::Optimizer> build(const std::vector<titan::NamedParameter>& params) const override {
    return std::make_unique<Muon>(params, config_.options);
  }

 private:
  MuonConfig config_;
};

}  // namespace

TITAN_PLUGIN_OF(optimizer, MuonFactory, "1.0",
                "Muon: Newton-Schulz orthogonalized momentum for 2-D weights (whole, once a step, under "
                "FSDP/TP), AdamW for the rest",
                read_config)
