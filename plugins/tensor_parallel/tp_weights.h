// Weights cut to this rank's tp piece on the meta model (so materialization
// allocates only the piece), with the layout that records the cut.
#pragma once
#include <string>

#include <ATen/core/Tensor.h>

#include "titan/placement.hpp"

namespace titan {
class Comm;
}

namespace titan::tensor_parallel {

// Cuts `weight` (still on meta) to this rank's slice of `dim`: Shard(dim)
// over tp. `name` is the parameter's, for errors.
TensorLayout shard_weight(const at::Tensor& weight, int64_t dim, const Comm& tp, const std::string& name);
// The layout of a weight every tp rank holds whole: Replicate() over tp.
TensorLayout whole_over_tp(const at::Tensor& weight);

}  // namespace titan::tensor_parallel
