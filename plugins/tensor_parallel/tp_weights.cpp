// Weights cut to this rank's tp piece on the meta model, with their layouts.
#include "tp_weights.h"

#include <ATen/ATen.h>

#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan::tensor_parallel {

TensorLayout shard_weight(const at::Tensor& weight, int64_t dim, const Comm& tp, const std::string& name) {
  if (!weight.is_meta()) {
    throw Error("tensor_parallel: parameter '" + name + "' is already materialized; TP must run on the meta model");
  }
  std::vector<int64_t> global = weight.sizes().vec();
  if (global[dim] % tp.size() != 0) {
    throw Error("tensor_parallel: parameter '" + name + "' " + c10::str(weight.sizes()) + " has dim " +
                std::to_string(dim) + " not divisible by tensor_parallel_degree " + std::to_string(tp.size()));
  }
  TensorLayout layout = TensorLayout::replicated(global);
  layout.local_shape[dim] = global[dim] / tp.size();
  layout.local_offset[dim] = layout.local_shape[dim] * tp.rank();
  layout.mesh_dims = {"tp"};
  layout.placements = {Placement::shard(dim)};
  weight.set_data(at::empty(layout.local_shape, weight.options()));
  return layout;
}

TensorLayout whole_over_tp(const at::Tensor& weight) {
  TensorLayout layout = TensorLayout::replicated(weight.sizes().vec());
  layout.mesh_dims = {"tp"};
  layout.placements = {Placement::replicate()};
  return layout;
}

}  // namespace titan::tensor_parallel
