// Lion's step on ATen in-place ops, in the parameter's dtype. Shapes are
// checked before anything changes, so a failed step leaves no half update.
#include "lion.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <set>

#include "titan/error.hpp"

namespace lion {

Lion::Lion(const std::vector<titan::NamedParameter>& params, const LionOptions& options) : options_(options) {
  at::NoGradGuard no_grad;
  std::set<std::string> names;
  for (const auto& param : params) {
    const std::string& name = param.name;
    const at::Tensor& tensor = param.tensor;
    if (!tensor.defined()) throw titan::Error("lion: parameter '" + name + "' is an undefined tensor");
    if (!names.insert(name).second) throw titan::Error("lion: parameter name '" + name + "' appears twice");
    states_.push_back({name, tensor, at::zeros_like(tensor, at::MemoryFormat::Preserve)});
  }
}

void Lion::step(double lr) {
  at::NoGradGuard no_grad;
  for (const auto& s : states_) {
    const at::Tensor& grad = s.param.grad();
    if (grad.defined() && !grad.sizes().equals(s.param.sizes())) {
      throw titan::Error("lion: parameter '" + s.name + "' and its gradient differ in shape (was the "
                         "parameter resharded after the optimizer was built?)");
    }
  }
  const LionOptions& o = options_;
  for (auto& s : states_) {
    const at::Tensor& grad = s.param.grad();
    if (!grad.defined()) continue;  // no gradient this step: parameter and momentum untouched
    if (o.weight_decay != 0) s.param.mul_(1 - lr * o.weight_decay);
    // The sign uses the momentum from before this step's update.
    at::Tensor direction = (s.exp_avg * o.beta1).add_(grad, 1 - o.beta1).sign_();
    s.param.add_(direction, -lr);
    s.exp_avg.mul_(o.beta2).add_(grad, 1 - o.beta2);
  }
}

void Lion::zero_grad() {
  for (auto& s : states_) s.param.mutable_grad().reset();
}

std::map<std::string, at::Tensor> Lion::state_tensors() {
  std::map<std::string, at::Tensor> out;
  for (const auto& s : states_) out.emplace(s.name + ".exp_avg", s.exp_avg);
  return out;
}

}  // namespace lion
