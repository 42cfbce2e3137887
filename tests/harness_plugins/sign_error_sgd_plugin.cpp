// Deliberately wrong: declares torch.optim.SGD's rule but steps up the
// gradient (p += lr * g). titan-conformance must fail its reference check.
// Its sibling `normalized_sgd` steps down g / rms(g) of the whole local
// tensor, which is not elementwise, so under FSDP each shard would move
// differently from the unsharded run.
#include <ATen/ATen.h>

#include "titan/optimizer.hpp"
#include "test_plugin.hpp"

namespace {

enum class Bug { sign_error, normalized_update };

template <Bug kBug>
class SignErrorSgd : public titan::Optimizer {
 public:
  explicit SignErrorSgd(const std::vector<titan::NamedParameter>& params) : params_(params) {}
  void step(double lr) override {
    at::NoGradGuard no_grad;
    for (auto& p : params_) {
      if (!p.tensor.grad().defined()) continue;
      if constexpr (kBug == Bug::normalized_update) {
        at::Tensor grad = p.tensor.grad();
        p.tensor.sub_(grad / grad.pow(2).mean().sqrt().clamp_min(1e-12), lr);  // the bug: a per-tensor statistic
      } else {
        p.tensor.add_(p.tensor.grad(), lr);  // the bug: + instead of -
      }
    }
  }
  void zero_grad() override {
    for (auto& p : params_) p.tensor.mutable_grad().reset();
  }
  std::map<std::string, at::Tensor> state_tensors() override { return {}; }

 private:
  std::vector<titan::NamedParameter> params_;
};

template <Bug kBug>
class SignErrorSgdFactory : public titan::OptimizerFactory {
 public:
  explicit SignErrorSgdFactory(double lr) : lr_(lr) {}
  double base_lr() const override { return lr_; }
  std::unique_ptr<titan::Optimizer> build(const std::vector<titan::NamedParameter>& params) const override {
    return std::make_unique<SignErrorSgd<kBug>>(params);
  }

 private:
  double lr_;
};

// The learning rate; the other options are read so the declaration's
// options are known keys.
double read_lr(const titan::ConfigNode& options) {
  options.get<double>("momentum", 0.0, "read so the declaration's options are known keys");
  options.get<double>("weight_decay", 0.0);
  return options.get<double>("lr", 0.1);
}

}  // namespace

TITAN_TEST_PLUGIN_OF(sign_error_sgd, optimizer, SignErrorSgdFactory<Bug::sign_error>, "1.0",
                     "a broken SGD (conformance test)", read_lr)
TITAN_TEST_PLUGIN_OF(normalized_sgd, optimizer, SignErrorSgdFactory<Bug::normalized_update>, "1.0",
                     "a broken SGD (conformance test)", read_lr)
