// Where tensor parallelism adds up the partial outputs of its layers: the
// rowwise linear (its reduction fused with the matmul under async TP) and
// reduce_partial_output, which the vocab-parallel embedding shares. In a
// file of its own so that a test build can link reductions that never
// happen in its place, with every other line of the plugin the real one,
// to check that titan-conformance catches it (tests/harness_plugins: unreduced_tp).
#include "tp_layers.h"

#include <ATen/ATen.h>

#include "async_tp.h"
#include "titan/autograd_collectives.hpp"
#include "titan/comm.hpp"

namespace titan::tensor_parallel {

at::Tensor reduce_partial_output(const at::Tensor& partial, const TpContext& tp) {
  if (tp.sequence_parallel) return reduce_scatter_autograd(partial, *tp.comm, kSequenceDim);
  return all_reduce_autograd(partial, *tp.comm);
}

at::Tensor RowwiseLinear::forward(const at::Tensor& input) {
  if (tp_.async && tp_.sequence_parallel) {
    if (const at::Tensor* weight = linear_weight(inner())) {
      CallSite site("tp matmul+reduce_scatter " + path_);
      return matmul_reduce_scatter(input, *weight, *tp_.comm, tp_.async_chunks);
    }
  }
  // A bias is added once, to the reduced output (each rank holds it whole).
  at::Tensor partial = biased_ ? at::linear(input, biased_->weight) : inner().forward(input);
  at::Tensor reduced;
  {
    CallSite site(std::string(tp_.sequence_parallel ? "tp reduce_scatter " : "tp all_reduce ") + path_);
    reduced = reduce_partial_output(partial, tp_);
  }
  return biased_ ? reduced + biased_->bias : reduced;
}

}  // namespace titan::tensor_parallel
