// The fused algorithms on CPU, for tests: `reference_*` is the plain ATen
// math the llama3 model runs today (differentiable by autograd);
// `emulated_*` is the algorithm the CUDA kernel in cuda/ implements, written
// out in LibTorch with the same blocking, fp32 accumulation and rounding
// points, with explicit backward passes. Plugin-private header.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace titan::fused {

// RMSNorm over the last dim (x [rows, dim], weight [dim]).
at::Tensor reference_rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps);
struct RmsNormForward {
  at::Tensor y, rstd;  // rstd [rows] fp32, saved for backward
};
RmsNormForward emulated_rmsnorm_forward(const at::Tensor& x, const at::Tensor& weight, double eps);
struct RmsNormGrads {
  at::Tensor grad_x, grad_weight;
};
RmsNormGrads emulated_rmsnorm_backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight,
                                       const at::Tensor& rstd);
// The kernel's row groups for the weight gradient (rows g, g + groups, ...).
int64_t rmsnorm_row_groups(int64_t rows);

// Rotary embedding, x [batch, seq, heads, head_dim], cos/sin [>= seq, head_dim/2].
at::Tensor reference_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// direction +1: forward; -1: backward (rotates a gradient back).
at::Tensor emulated_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int direction);

// SwiGLU's elementwise part silu(a) * b.
at::Tensor reference_swiglu(const at::Tensor& a, const at::Tensor& b);
at::Tensor emulated_swiglu_forward(const at::Tensor& a, const at::Tensor& b);
struct SwigluGrads {
  at::Tensor grad_a, grad_b;
};
SwigluGrads emulated_swiglu_backward(const at::Tensor& grad_out, const at::Tensor& a, const at::Tensor& b);

// Output projection + mean cross-entropy over labels != ignore_index:
// hidden [tokens, dim], weight [vocab, dim], labels [tokens] int64.
at::Tensor reference_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                          int64_t ignore_index = -100);
struct CrossEntropyForward {
  at::Tensor loss, lse;  // fp32 scalar; fp32 [tokens], saved for backward
};
CrossEntropyForward emulated_chunked_cross_entropy_forward(const at::Tensor& hidden, const at::Tensor& weight,
                                                           const at::Tensor& labels, int64_t chunk,
                                                           int64_t ignore_index = -100);
struct CrossEntropyGrads {
  at::Tensor grad_hidden, grad_weight;
};
CrossEntropyGrads emulated_chunked_cross_entropy_backward(const at::Tensor& hidden, const at::Tensor& weight,
                                                          const at::Tensor& labels, const at::Tensor& lse,
                                                          const at::Tensor& grad_loss, int64_t chunk,
                                                          int64_t ignore_index = -100);

}  // namespace titan::fused
