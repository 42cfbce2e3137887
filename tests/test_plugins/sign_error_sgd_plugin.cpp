// Deliberately wrong: declares torch.optim.SGD's rule but steps up the
// gradient (p += lr * g). titan-conformance must fail its reference check.
#include <ATen/ATen.h>

#include "titan/optimizer.hpp"
#include "titan/plugin.hpp"

namespace {

class SignErrorSgd : public titan::Optimizer {
 public:
  explicit SignErrorSgd(const std::vector<titan::NamedParameter>& params) : params_(params) {}
  void step(double lr) override {
    at::NoGradGuard no_grad;
    for (auto& p : params_) {
      if (p.tensor.grad().defined()) p.tensor.add_(p.tensor.grad(), lr);  // the bug: + instead of -
    }
  }
  void zero_grad() override {
    for (auto& p : params_) p.tensor.mutable_grad().reset();
  }
  std::map<std::string, at::Tensor> state_tensors() override { return {}; }

 private:
  std::vector<titan::NamedParameter> params_;
};

class SignErrorSgdFactory : public titan::OptimizerFactory {
 public:
  explicit SignErrorSgdFactory(double lr) : lr_(lr) {}
  double base_lr() const override { return lr_; }
  std::unique_ptr<titan::Optimizer> build(const std::vector<titan::NamedParameter>& params) const override {
    return std::make_unique<SignErrorSgd>(params);
  }

 private:
  double lr_;
};

void register_sign_error_sgd(titan::PluginRegistrar& registrar) {
  registrar.optimizer([](const titan::PluginContext& context) {
    const auto& o = context.options;
    o.get<double>("momentum", 0.0, "read so the declaration's options are known keys");
    o.get<double>("weight_decay", 0.0);
    return std::make_unique<SignErrorSgdFactory>(o.get<double>("lr", 0.1));
  });
}

}  // namespace

TITAN_PLUGIN("sign_error_sgd", "1.0", titan::kind_optimizer, "SGD with a sign error (conformance test)",
             register_sign_error_sgd)
