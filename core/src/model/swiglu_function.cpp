// SwiGLU as one autograd node (swiglu_function.hpp): two nodes were two
// rounds of the autograd engine's host work per feed-forward.
#include "swiglu_function.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

namespace titan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const at::Tensor activated = at::silu(gate);
    ctx->save_for_backward({gate, up, activated});
    return activated * up;
  }

  // MulBackward0's two products (each in its operand's dtype), then
  // SiluBackward0's silu_backward for the gate.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1], &activated = saved[2];
    const at::Tensor& grad = grads[0];
    at::Tensor grad_gate, grad_up;
    if (ctx->needs_input_grad(0)) {
      grad_gate = at::silu_backward((grad * up).to(activated.scalar_type()), gate);
    }
    if (ctx->needs_input_grad(1)) grad_up = (grad * activated).to(up.scalar_type());
    return {grad_gate, grad_up};
  }
};

}  // namespace

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) { return SwigluFunction::apply(gate, up); }

}  // namespace titan
