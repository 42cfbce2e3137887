// The AdamW update on ATen in-place ops, in the parameter's dtype (bf16
// parameters keep bf16 moments, as PyTorch does). foreach and for-loop run
// the same ops in the same order, so they agree bit for bit on CPU; fused
// is ATen's one-pass kernel (its own rounding, within 1e-6 of them).
#include "adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <set>
#include <sstream>
#include <tuple>

#include "titan/error.hpp"

namespace titan::adamw {

namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

std::tuple<int, int, int> device_and_dtype(const at::Tensor& p) {
  return {static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type())};
}

// _foreach_* lists and _fused_adamw_ need tensors of one device and dtype.
template <typename Update>
std::vector<std::vector<const Update*>> by_device_and_dtype(const std::vector<Update>& updates) {
  std::map<std::tuple<int, int, int>, std::vector<const Update*>> groups;
  for (const auto& update : updates) groups[device_and_dtype(update.state->param)].push_back(&update);
  std::vector<std::vector<const Update*>> lists;
  for (auto& entry : groups) lists.push_back(std::move(entry.second));
  return lists;
}

}  // namespace

AdamW::AdamW(const std::vector<NamedParameter>& params, const AdamWOptions& options) : options_(options) {
  at::NoGradGuard no_grad;
  std::set<std::string> names;
  states_.reserve(params.size());
  for (const auto& param : params) {
    const std::string& name = param.name;
    const at::Tensor& tensor = param.tensor;
    if (!tensor.defined()) throw Error("adamw: parameter '" + name + "' is an undefined tensor");
    if (!names.insert(name).second) throw Error("adamw: parameter name '" + name + "' appears twice");
    if (tensor.is_sparse()) throw Error("adamw: parameter '" + name + "' is sparse; sparse AdamW is not supported");
    ParamState state;
    state.name = name;
    state.param = tensor;
    state.exp_avg = at::zeros_like(tensor, at::MemoryFormat::Preserve);
    state.exp_avg_sq = at::zeros_like(tensor, at::MemoryFormat::Preserve);
    state.step = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(at::kCPU));
    states_.push_back(std::move(state));
  }
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  std::vector<Update> updates;
  updates.reserve(states_.size());
  // Every gradient is checked before any state changes, so an error leaves
  // the optimizer as it was.
  for (auto& state : states_) {
    const at::Tensor& grad = state.param.grad();
    if (!grad.defined()) continue;  // no gradient: untouched, its step does not advance
    if (grad.is_sparse()) throw Error("adamw: parameter '" + state.name + "' has a sparse gradient (unsupported)");
    if (!grad.sizes().equals(state.param.sizes()) || !state.exp_avg.sizes().equals(state.param.sizes())) {
      throw Error("adamw: parameter '" + state.name + "' has shape " + shape_text(state.param.sizes()) +
                  ", its gradient " + shape_text(grad.sizes()) + " and its optimizer state " +
                  shape_text(state.exp_avg.sizes()) +
                  " (was the parameter resharded after the optimizer was built?)");
    }
    updates.push_back({&state, grad, 0, 0});
  }
  if (updates.empty()) return;
  for (auto& update : updates) {
    // The counter is a host tensor (a checkpoint loads into it): counted
    // and read in its memory, so the step reads nothing from the device.
    at::Tensor& step = update.state->step;
    if (!step.is_cpu() || step.scalar_type() != at::kDouble || !step.is_contiguous()) {
      step = step.to(at::kCPU, at::kDouble).contiguous();
    }
    double& t = *step.data_ptr<double>();
    t += 1;
    update.step_size = lr / (1 - std::pow(options_.beta1, t));
    update.bias_correction2_sqrt = std::sqrt(1 - std::pow(options_.beta2, t));
  }
  switch (options_.implementation) {
    case AdamWOptions::Implementation::foreach: apply_foreach(updates, lr); break;
    case AdamWOptions::Implementation::for_loop: apply_for_loop(updates, lr); break;
    case AdamWOptions::Implementation::fused: apply_fused(updates, lr); break;
  }
}

void AdamW::apply_for_loop(const std::vector<Update>& updates, double lr) const {
  const auto& o = options_;
  for (const auto& update : updates) {
    ParamState& s = *update.state;
    if (o.weight_decay != 0) s.param.mul_(1 - lr * o.weight_decay);
    s.exp_avg.mul_(o.beta1).add_(update.grad, 1 - o.beta1);
    s.exp_avg_sq.mul_(o.beta2).addcmul_(update.grad, update.grad, 1 - o.beta2);
    at::Tensor denom = (s.exp_avg_sq.sqrt() / update.bias_correction2_sqrt).add_(o.eps);
    s.param.addcdiv_(s.exp_avg, denom, -update.step_size);
  }
}

void AdamW::apply_foreach(const std::vector<Update>& updates, double lr) const {
  const auto& o = options_;
  for (const auto& group : by_device_and_dtype(updates)) {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<at::Scalar> bias_correction2_sqrts, neg_step_sizes;
    for (const Update* update : group) {
      params.push_back(update->state->param);
      grads.push_back(update->grad);
      exp_avgs.push_back(update->state->exp_avg);
      exp_avg_sqs.push_back(update->state->exp_avg_sq);
      bias_correction2_sqrts.emplace_back(update->bias_correction2_sqrt);
      neg_step_sizes.emplace_back(-update->step_size);
    }
    if (o.weight_decay != 0) at::_foreach_mul_(params, 1 - lr * o.weight_decay);
    at::_foreach_mul_(exp_avgs, o.beta1);
    at::_foreach_add_(exp_avgs, grads, 1 - o.beta1);
    at::_foreach_mul_(exp_avg_sqs, o.beta2);
    at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - o.beta2);
    std::vector<at::Tensor> denoms = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denoms, bias_correction2_sqrts);
    at::_foreach_add_(denoms, o.eps);
    at::_foreach_addcdiv_(params, exp_avgs, denoms, neg_step_sizes);
  }
}

void AdamW::apply_fused(const std::vector<Update>& updates, double lr) {
  const auto& o = options_;
  // One kernel call per group. The kernel reads each parameter's step count
  // on the parameters' device, not copied from the host per parameter.
  for (const auto& group : by_device_and_dtype(updates)) {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<double> counts;
    for (const Update* update : group) {
      ParamState& state = *update->state;
      params.push_back(state.param);
      grads.push_back(update->grad);
      exp_avgs.push_back(state.exp_avg);
      exp_avg_sqs.push_back(state.exp_avg_sq);
      counts.push_back(*state.step.data_ptr<double>());
    }
    std::map<double, at::Tensor>& held = device_steps_[device_and_dtype(params.front())];
    held = step_tensors(held, std::set<double>(counts.begin(), counts.end()), params.front().options());
    std::vector<at::Tensor> steps;
    for (double t : counts) steps.push_back(held.at(t));
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, o.beta1, o.beta2,
                      o.weight_decay, o.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

std::map<double, at::Tensor> AdamW::step_tensors(const std::map<double, at::Tensor>& held,
                                                 const std::set<double>& counts, const at::TensorOptions& options) {
  std::map<double, at::Tensor> next;
  std::vector<at::Tensor> advancing;
  for (double t : counts) {
    auto same = held.find(t), before = held.find(t - 1);
    if (same != held.end()) {
      next.emplace(t, same->second);
    } else if (before != held.end() && counts.count(t - 1) == 0) {
      next.emplace(t, before->second);
      advancing.push_back(before->second);
    } else {  // the first fused step, a count loaded from a checkpoint, or a parameter that skipped steps
      next.emplace(t, at::full({}, t, options.dtype(at::kFloat)));
    }
  }
  if (advancing.empty()) return next;
  if (options.device().is_cpu()) {
    // The host's own memory: written, not dispatched (an add of a Scalar
    // on CPU costs four ops, the Scalar's conversion included).
    for (auto& [t, tensor] : next) *tensor.data_ptr<float>() = static_cast<float>(t);
  } else {
    at::_foreach_add_(advancing, 1.0);  // as torch.optim advances them: on the device, no copy from the host
  }
  return next;
}

void AdamW::zero_grad() {
  // As PyTorch's default (set_to_none): frees the gradients' memory.
  for (auto& state : states_) state.param.mutable_grad().reset();
}

std::map<std::string, at::Tensor> AdamW::state_tensors() {
  std::map<std::string, at::Tensor> out;
  for (const auto& state : states_) {
    out.emplace(state.name + ".exp_avg", state.exp_avg);
    out.emplace(state.name + ".exp_avg_sq", state.exp_avg_sq);
    out.emplace(state.name + ".step", state.step);
  }
  return out;
}

}  // namespace titan::adamw
