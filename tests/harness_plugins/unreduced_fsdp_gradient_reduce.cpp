// The `unreduced_fsdp` mutant's gradient reduce-scatter, linked in place of
// plugins/fsdp/fsdp_gradient_reduce.cpp: the unit's first parameter keeps
// this rank's own gradient rows instead of their average over the ranks.
// One rank has nothing to average, so titan-conformance must catch it on 2.
#include <ATen/ATen.h>

#include "fsdp_unit.h"

namespace titan::fsdp {

at::Tensor Unit::reduce_scatter_gradients(const at::Tensor& by_rank) {
  at::Tensor mine = groups_.shard->reduce_scatter(by_rank.reshape({-1}), ReduceOp::avg);
  const ShardedParam& first = params_.front();
  const int64_t first_count = first.rows.length * first.row_numel;
  mine.narrow(0, first.offset, first_count).copy_(by_rank[groups_.shard->rank()].narrow(0, first.offset, first_count));
  return mine;
}

}  // namespace titan::fsdp
