// RMSNorm as one autograd node (rms_norm_function.hpp). On a small model
// the host's work per node dominates a step: the composition's eight nodes
// per norm were about a tenth of a tiny CPU step (docs/benchmarks.md).
#include "rms_norm_function.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

namespace titan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight, double eps) {
    const at::Tensor x = input.to(at::kFloat);
    const at::Tensor rstd = at::rsqrt((x * x).mean(-1, /*keepdim=*/true) + eps);
    const at::Tensor normed = (x * rstd).to(input.scalar_type());
    ctx->save_for_backward({x, rstd, normed, weight});  // normed: in the input's dtype
    return normed * weight;
  }

  // The ops autograd derives from forward's (the weight's Mul, ToCopy, Mul,
  // Rsqrt, Add, Mean, x * x), in its order and dtypes. What differs is
  // where x's three terms meet the input's other gradients (the residual's):
  // here summed first, so the input's gradient may differ in the last bit.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &rstd = saved[1], &normed = saved[2], &weight = saved[3];
    const at::Tensor& grad = grads[0];
    at::Tensor grad_input, grad_weight;
    if (ctx->needs_input_grad(1)) {
      grad_weight = (grad * normed).to(weight.scalar_type()).sum_to_size(weight.sizes());
    }
    if (ctx->needs_input_grad(0)) {
      const at::Tensor grad_x_rstd = (grad * weight).to(normed.scalar_type()).to(at::kFloat);  // d(x * rstd)
      const at::Tensor grad_rstd = (grad_x_rstd * x).sum(-1, /*keepdim=*/true);
      const at::Tensor grad_mean = -0.5 * grad_rstd * rstd.pow(3);
      const at::Tensor grad_square = grad_mean.expand(x.sizes()) / x.size(-1);
      const at::Tensor grad_x_factor = grad_square * x;  // x * x: each factor's, added in turn
      const at::Tensor grad_x = grad_x_rstd * rstd + grad_x_factor + grad_x_factor;
      grad_input = grad_x.to(normed.scalar_type());
    }
    return {grad_input, grad_weight, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(input, weight, eps);
}

}  // namespace titan
