// The `rounded_norms_fsdp` mutant's gradient reduce-scatter, linked in place
// of plugins/fsdp/fsdp_gradient_reduce.cpp: the gradients of a unit's 1-D
// parameters (its norms' weights) come back rounded to float16, as a plugin
// that kept small tensors in a narrow dtype would. The loss, the global norm
// and the parameters' absolute differences barely notice; titan-conformance's
// per-parameter check (parallelizer.param_grads) must.
#include <ATen/ATen.h>

#include "fsdp_unit.h"

namespace titan::fsdp {

at::Tensor Unit::reduce_scatter_gradients(const at::Tensor& by_rank) {
  at::Tensor mine = groups_.shard->reduce_scatter(by_rank.reshape({-1}), ReduceOp::avg);
  for (const ShardedParam& p : params_) {
    if (p.unsharded_shape.size() != 1) continue;
    at::Tensor rows = mine.narrow(0, p.offset, p.outer * p.rows.length * p.row_numel);
    rows.copy_(rows.to(at::kHalf));
  }
  return mine;
}

}  // namespace titan::fsdp
