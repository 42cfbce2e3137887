// A bias-free Linear as one autograd node (linear_function.hpp).
#include "linear_function.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include "titan/compat.hpp"

namespace titan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor rows_of(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}); }

std::vector<int64_t> with_last(at::IntArrayRef sizes, int64_t last) {
  std::vector<int64_t> shape = sizes.vec();
  shape.back() = last;
  return shape;
}

struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight) {
    ctx->save_for_backward({input, weight});
    return rows_of(input).mm(weight.t()).view(with_last(input.sizes(), weight.size(0)));
  }

  // MmBackward0's two products for mat1 = the input's rows and mat2 =
  // weight^T (column-major): grad @ weight, and (grad^T @ rows)^T^T, i.e.
  // grad^T @ rows; each only where the engine asks (a pipeline's split
  // backward takes the input's in one pass and the weight's in another).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1];
    const at::Tensor grad = rows_of(grads[0]);
    at::Tensor grad_input, grad_weight;
    if (ctx->needs_input_grad(0)) grad_input = grad.mm(weight).view(input.sizes());
    if (ctx->needs_input_grad(1)) grad_weight = grad.t().mm(rows_of(input));
    return {grad_input, grad_weight};
  }
};

}  // namespace

at::Tensor linear_no_bias(const at::Tensor& input, const at::Tensor& weight) {
  // Under autocast the product multiplies casts of its operands, which
  // the composition's nodes keep for backward (this node would keep the
  // originals, and its backward would multiply mismatched dtypes).
  if (compat::autocast_enabled(input.device().type())) return at::linear(input, weight);
  return LinearFunction::apply(input, weight);
}

}  // namespace titan
