// Unit::reduce_scatter_gradients, the reduce-scatter of a unit's gradients,
// in a file of its own: a test build links a deliberately wrong reduction
// in its place, with every other line of FSDP the real one, to check that
// titan-conformance catches it (tests/harness_plugins: unreduced_fsdp).
#include "fsdp_unit.h"

#include <ATen/ATen.h>

namespace titan::fsdp {

at::Tensor Unit::reduce_scatter_gradients(const at::Tensor& by_rank) {
  return groups_.shard->reduce_scatter(by_rank.reshape({-1}), ReduceOp::avg);
}

}  // namespace titan::fsdp
