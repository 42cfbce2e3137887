// The float8 experts' grouped GEMM: every expert's product in one call, as
// TorchTitan's Float8GroupedExperts (torchao's rowwise recipe). The casts
// are the float8 linear's, per expert; the products run as one
// `_scaled_grouped_mm` on a GPU that has it (sm_90 / sm_100, bfloat16
// activations), else one `_scaled_mm` per expert (other GPUs of sm_89+),
// else, and with `emulate`, in float32 on the codes' values (the exact
// emulation, the reference of the other two). Plugin-private header.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "float8_scaling.h"

namespace titan::float8 {

// x [rows, K] in expert order @ weights [E, N, K]^T per expert -> [rows, N]
// (autograd: gradients for x and weights). `group_rows` (host) are each
// expert's rows, `group_ends` (int32, x's device) where they end; under
// `_scaled_grouped_mm` or `_scaled_mm` each a multiple of 16. Every operand
// is cast along its product's contraction dim, as the float8 linear casts
// it: x and grad_output per row, the weights per output row (forward) and
// per input column (grad_input), and for grad_weight grad_output and x per
// column over each expert's own rows. `recipe` must be rowwise.
at::Tensor float8_grouped_linear(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& group_ends,
                                 const std::vector<int64_t>& group_rows, const Recipe& recipe, bool emulate);

}  // namespace titan::float8
