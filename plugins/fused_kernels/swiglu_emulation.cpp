// SwiGLU's elementwise part as cuda/swiglu.cu computes it: all in fp32 with
// one rounding to T per output (ATen rounds silu(a) before the multiply).
#include <ATen/ATen.h>

#include "fused_ops.h"

namespace titan::fused {

at::Tensor emulated_swiglu_forward(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor a32 = a.to(at::kFloat);
  return (a32 * at::sigmoid(a32) * b.to(at::kFloat)).to(a.scalar_type());
}

SwigluGrads emulated_swiglu_backward(const at::Tensor& grad_out, const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.to(at::kFloat), g = grad_out.to(at::kFloat), s = at::sigmoid(x);
  at::Tensor grad_a = g * b.to(at::kFloat) * s * (1 + x * (1 - s));  // d silu = s (1 + a (1 - s))
  at::Tensor grad_b = g * x * s;
  return {grad_a.to(a.scalar_type()), grad_b.to(b.scalar_type())};
}

}  // namespace titan::fused
