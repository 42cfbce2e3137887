// The `unreduced_tp` mutant's reductions, linked in place of
// plugins/tensor_parallel/tp_reduction.cpp: partial outputs are never added
// up (with sequence parallelism each rank keeps its own rows of its partial
// sum), and rowwise linears never take the fused async path, which would
// add them up. Shapes stay right, the numbers do not: titan-conformance
// must notice.
#include <ATen/ATen.h>

#include "titan/comm.hpp"
#include "tp_layers.h"

namespace titan::tensor_parallel {

at::Tensor reduce_partial_output(const at::Tensor& partial, const TpContext& tp) {
  if (!tp.sequence_parallel) return partial;
  int64_t rows = partial.size(kSequenceDim) / tp.comm->size();
  return partial.narrow(kSequenceDim, rows * tp.comm->rank(), rows);
}

at::Tensor RowwiseLinear::forward(const at::Tensor& input) {
  return reduce_partial_output(inner().forward(input), tp_);
}

}  // namespace titan::tensor_parallel
