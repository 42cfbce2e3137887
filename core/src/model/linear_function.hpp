// A bias-free Linear's product as one autograd node (Linear::forward calls
// it).
#pragma once
#include <ATen/core/Tensor.h>

// Core's own, not the SDK's: kept out of libtitan_core's exports.
#pragma GCC visibility push(hidden)

namespace titan {

// input [..., in] @ weight [out, in]^T -> [..., out]. One autograd node
// whose backward runs the products autograd derives for at::linear's
// (mm of the flattened input against weight^T), with the same operands and
// layouts: the same bits, without its four nodes (t, reshape, mm, view).
// Under autocast, at::linear itself.
at::Tensor linear_no_bias(const at::Tensor& input, const at::Tensor& weight);

}  // namespace titan

#pragma GCC visibility pop
