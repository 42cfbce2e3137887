// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// the update rule over local parameters and its one state, the momentum.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "titan/optimizer.hpp"

namespace lion {

struct LionOptions {
  double beta1 = 0.9;         // interpolation of momentum and gradient for the update's sign
  double beta2 = 0.99;        // decay rate of the momentum
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * weight_decay
};

// One step, per parameter p with gradient g and momentum m:
//   p *= 1 - lr * weight_decay
//   p -= lr * sign(beta1 * m + (1 - beta1) * g)
//   m  = beta2 * m + (1 - beta2) * g
class Lion : public titan::Optimizer {
 public:
  // Allocates the momenta now (zeros), so a checkpoint can be loaded into
  // state_tensors() in place before the first step.
  Lion(const std::vector<titan::NamedParameter>& params, const LionOptions& options);

  void step(double lr) override;
  void zero_grad() override;
  // "<param name>.exp_avg": Lion's momentum, shaped and placed like its param.
  std::map<std::string, at::Tensor> state_tensors() override;

 private:
  struct ParamState {
    std::string name;
    at::Tensor param;
    at::Tensor exp_avg;
  };
  LionOptions options_;
  std::vector<ParamState> states_;
};

}  // namespace lion
