// RMSNorm's math as one autograd node (RMSNorm::forward calls it).
#pragma once
#include <ATen/core/Tensor.h>

// Core's own, not the SDK's: kept out of libtitan_core's exports.
#pragma GCC visibility push(hidden)

namespace titan {

// weight * (x / sqrt(mean(x^2) + eps)) in float32, normalized back to the
// input's dtype before the weight, as TorchTitan's. One autograd node whose
// backward runs the ops autograd would derive from the composition, in its
// order, without a node (and the engine's work for it) per op.
at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps);

}  // namespace titan

#pragma GCC visibility pop
