// Rotary embedding as cuda/rope.cu computes it: each interleaved pair
// rotated in fp32 by its position's angle (direction -1: the opposite
// angle, which is the backward pass), rounded once to T.
#include <ATen/ATen.h>

#include "fused_ops.h"

namespace titan::fused {

at::Tensor emulated_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int direction) {
  int64_t batch = x.size(0), seq = x.size(1), heads = x.size(2), half = x.size(3) / 2;
  at::Tensor pairs = x.to(at::kFloat).reshape({batch, seq, heads, half, 2});
  at::Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  at::Tensor c = cos.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
  at::Tensor s = sin.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half}) * static_cast<double>(direction);
  at::Tensor out = at::empty_like(pairs);
  out.select(-1, 0).copy_(even * c - odd * s);
  out.select(-1, 1).copy_(even * s + odd * c);
  return out.view(x.sizes()).to(x.scalar_type());
}

}  // namespace titan::fused
