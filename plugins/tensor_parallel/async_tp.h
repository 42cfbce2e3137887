// Async tensor parallelism: the all-gather before a colwise matmul and the
// reduce-scatter after a rowwise one, split into sequence chunks so each
// chunk's collective runs while the previous chunk's matmul computes (the
// decomposition TorchTitan's micro-pipeline TP applies). Autograd functions
// whose backward is the mirror decomposition. On Gloo this runs the same
// arithmetic, so its numerics are tested on CPU; the speed is the GPU's.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan {
class Comm;
}

namespace titan::tensor_parallel {

// x [batch, seq / tp, in] sharded on the sequence, weight [out_local, in]:
// all_gather(x, seq) @ weight^T -> [batch, seq, out_local].
at::Tensor all_gather_matmul(const at::Tensor& x, const at::Tensor& weight, Comm& comm, int64_t chunks);
// x [batch, seq, in_local], weight [out, in_local]: this rank's sequence
// shard of sum over ranks of x @ weight^T -> [batch, seq / tp, out].
at::Tensor matmul_reduce_scatter(const at::Tensor& x, const at::Tensor& weight, Comm& comm, int64_t chunks);

}  // namespace titan::tensor_parallel
