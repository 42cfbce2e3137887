// Autograd functions over the emulations in fused_ops.h, and the layers
// and loss that use them.
#include "emulated_layers.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include "fused_ops.h"

namespace titan::fused {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    RmsNormForward out = emulated_rmsnorm_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, out.rstd});
    return out.y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    RmsNormGrads g = emulated_rmsnorm_backward(grads[0].contiguous(), saved[0], saved[1], saved[2]);
    return {g.grad_x, g.grad_weight, at::Tensor()};
  }
};

struct LinearCrossEntropyFunction : torch::autograd::Function<LinearCrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t chunk) {
    CrossEntropyForward out = emulated_chunked_cross_entropy_forward(hidden, weight, labels, chunk);
    ctx->save_for_backward({hidden, weight, labels, out.lse});
    ctx->saved_data["chunk"] = chunk;
    return out.loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    CrossEntropyGrads g = emulated_chunked_cross_entropy_backward(saved[0], saved[1], saved[2], saved[3], grads[0],
                                                                  ctx->saved_data["chunk"].toInt());
    return {g.grad_hidden, g.grad_weight, at::Tensor(), at::Tensor()};
  }
};

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return emulated_rope(x, cos, sin, +1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {emulated_rope(grads[0].contiguous(), saved[0], saved[1], -1), at::Tensor(), at::Tensor()};
  }
};

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return emulated_swiglu_forward(gate, up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    SwigluGrads g = emulated_swiglu_backward(grads[0].contiguous(), saved[0], saved[1]);
    return {g.grad_a, g.grad_b};
  }
};

}  // namespace

at::Tensor EmulatedRotary::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (cos.dim() == 3) return forward_by_token(x, cos, sin);
  return RotaryFunction::apply(x, cos, sin);
}

at::Tensor EmulatedSwiGLU::forward(const at::Tensor& gate, const at::Tensor& up) {
  return SwigluFunction::apply(gate, up);
}

at::Tensor EmulatedRMSNorm::forward(const at::Tensor& input) {
  at::Tensor rows = input.reshape({-1, input.size(-1)});
  return RmsNormFunction::apply(rows, norm_->weight, norm_->eps).view(input.sizes());
}

LossFn chunked_linear_cross_entropy(at::Tensor weight, int64_t chunk) {
  return [weight, chunk](const at::Tensor& hidden, const at::Tensor& labels) {
    return LinearCrossEntropyFunction::apply(hidden.reshape({-1, hidden.size(-1)}), weight, labels.reshape({-1}),
                                             chunk);
  };
}

}  // namespace titan::fused
