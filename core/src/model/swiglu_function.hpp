// SwiGLU's product as one autograd node (SwiGLU::forward calls it).
#pragma once
#include <ATen/core/Tensor.h>

// Core's own, not the SDK's: kept out of libtitan_core's exports.
#pragma GCC visibility push(hidden)

namespace titan {

// silu(gate) * up, one autograd node whose backward runs autograd's ops
// for the composition (Mul, then silu_backward): the same bits.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace titan

#pragma GCC visibility pop
