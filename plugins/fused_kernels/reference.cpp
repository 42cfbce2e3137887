// The ATen path the fused kernels replace, with the llama3 model's exact
// math and rounding points (models/llama3/llama3_model.cpp; read, not
// shared: a plugin does not include another plugin's code).
#include <ATen/ATen.h>

#include "fused_ops.h"

namespace titan::fused {

at::Tensor reference_rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

at::Tensor reference_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t seq = x.size(1), half = x.size(3) / 2;
  at::Tensor pairs = x.to(at::kFloat).reshape({x.size(0), seq, x.size(2), half, 2});
  at::Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  at::Tensor c = cos.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  at::Tensor s = sin.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  return at::stack({even * c - odd * s, even * s + odd * c}, -1).flatten(3).to(x.scalar_type());
}

at::Tensor reference_swiglu(const at::Tensor& a, const at::Tensor& b) { return at::silu(a) * b; }

at::Tensor reference_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                          int64_t ignore_index) {
  // The trainer's loss: full logits in the compute dtype, then fp32.
  at::Tensor logits = at::linear(hidden, weight).to(at::kFloat);
  return at::cross_entropy_loss(logits, labels, /*weight=*/{}, at::Reduction::Mean, ignore_index);
}

}  // namespace titan::fused
