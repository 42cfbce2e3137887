// Collectives as autograd functions with their adjoints, so parallel
// layers differentiate correctly: all-gather <-> reduce-scatter,
// all-reduce <-> identity, all-to-all <-> the inverse all-to-all.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace titan {

class Comm;

// Concatenation of every rank's `input` along `dim`; backward: the
// gradient's matching slice, summed over ranks (reduce-scatter).
at::Tensor all_gather_autograd(const at::Tensor& input, Comm& comm, int64_t dim = 0);
// The same concatenation for a computation every rank then repeats whole
// (a loss on gathered logits): the gradient arrives whole on every rank, so
// backward is this rank's slice of it, with no communication.
at::Tensor all_gather_to_replicate(const at::Tensor& input, Comm& comm, int64_t dim);
// Sum over ranks, this rank's slice along `dim`; backward: all-gather.
at::Tensor reduce_scatter_autograd(const at::Tensor& input, Comm& comm, int64_t dim = 0);
// Sum over ranks; backward: identity (each rank's input contributed once).
at::Tensor all_reduce_autograd(const at::Tensor& input, Comm& comm);
// Identity forward; backward: sum of the gradients over ranks (the input
// was replicated and consumed by every rank's piece of the computation).
at::Tensor replicate_to_parallel(const at::Tensor& input, Comm& comm);
// Blocks along `split_dim` go to ranks and arrive concatenated along
// `concat_dim`; backward: the inverse exchange.
at::Tensor all_to_all_autograd(const at::Tensor& input, Comm& comm, int64_t split_dim, int64_t concat_dim);
// Uneven rows along dim 0 (Comm::all_to_all_v); backward: the gradient's
// rows sent back the way they came (the splits swapped).
at::Tensor all_to_all_v_autograd(const at::Tensor& input, Comm& comm, const std::vector<int64_t>& send_rows,
                                 const std::vector<int64_t>& recv_rows);

}  // namespace titan
