// CpuLinear's autograd function: y = x W^T, dx = dy W, dW = dy^T x, each one
// matmul_nt call on 2-D views (no transposed copies).
#include "cpu_linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "titan/onednn_matmul.hpp"

namespace titan::fused {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool fp32_cpu(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat;
}

struct CpuLinearFunction : torch::autograd::Function<CpuLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight) {
    at::Tensor rows = input.reshape({-1, input.size(-1)});
    ctx->save_for_backward({rows, weight});
    ctx->saved_data["input_sizes"] = input.sizes().vec();
    std::vector<int64_t> sizes = input.sizes().vec();
    sizes.back() = weight.size(0);
    return matmul_nt(rows, weight).view(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& rows = saved[0];
    const at::Tensor& weight = saved[1];
    at::Tensor grad = grads[0].reshape({-1, weight.size(0)});
    at::Tensor grad_input, grad_weight;
    if (ctx->needs_input_grad(0)) {
      grad_input = matmul_nt(grad, weight.t()).view(ctx->saved_data["input_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) grad_weight = matmul_nt(grad.t(), rows.t());
    return {grad_input, grad_weight};
  }
};

}  // namespace

at::Tensor CpuLinear::forward(const at::Tensor& input) {
  const at::Tensor& weight = linear_->weight;
  if (!onednn_matmul_preferred() || !fp32_cpu(input) || !fp32_cpu(weight)) return linear_->forward(input);
  return CpuLinearFunction::apply(input, weight);
}

}  // namespace titan::fused
