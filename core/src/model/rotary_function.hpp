// The rotary rotations as one autograd node each (Rotary::forward and
// RotateHalfRotary::forward call them).
#pragma once
#include <ATen/core/Tensor.h>

// Core's own, not the SDK's: kept out of libtitan_core's exports.
#pragma GCC visibility push(hidden)

namespace titan {

// x [batch, seq, heads, head_dim]: each pair (x[2i], x[2i+1]) rotated by the
// angle whose cos and sin are `cos` and `sin` (fp32, broadcast to [batch,
// seq, heads, head_dim / 2]), in fp32, back in x's dtype. One autograd node;
// its backward (the rotation by minus the angle) gives autograd's bits.
at::Tensor rotate_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// The same for dims (i, i + head_dim / 2) (rotate_half: HF's Qwen3, GPT-OSS).
at::Tensor rotate_halves(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace titan

#pragma GCC visibility pop
