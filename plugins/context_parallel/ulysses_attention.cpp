// Ulysses: all-to-all around the model's own causal attention.
#include "ulysses_attention.h"

#include <ATen/ATen.h>

#include "titan/autograd_collectives.hpp"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/host_to_device.hpp"

namespace titan::context_parallel {

UlyssesAttention::UlyssesAttention(std::shared_ptr<const RingSetup> setup) : setup_(std::move(setup)) {}

at::Tensor UlyssesAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& documents) {
  Comm& comm = *setup_->comm;
  const int64_t ranks = comm.size(), heads = q.size(1);
  if (heads % ranks != 0) {
    throw Error("context_parallel: Ulysses splits the " + std::to_string(heads) + " attention heads a rank computes "
                "over context_parallel_degree=" + std::to_string(ranks) + "; they must divide");
  }
  CallSite site("context_parallel ulysses");
  at::Tensor key = k, value = v;
  if (k.size(1) % ranks != 0) {  // fewer kv heads than ranks: each rank gets its groups' copies
    key = k.repeat_interleave(heads / k.size(1), 1);
    value = v.repeat_interleave(heads / v.size(1), 1);
  }
  // [batch, heads, piece, dim] -> [batch, heads / cp, whole sequence in rank order, dim]
  auto whole_sequence = [&](const at::Tensor& x) { return all_to_all_autograd(x.contiguous(), comm, 1, 2); };
  const int64_t seq = q.size(2) * ranks;
  std::vector<at::Tensor> pieces;
  for (int64_t rank = 0; rank < ranks; ++rank) pieces.push_back(setup_->layout.positions(seq, rank));
  at::Tensor rank_order = host_to_device(at::cat(pieces), q.device());  // global position of each gathered row
  at::Tensor sequence_order = at::argsort(rank_order);
  auto sorted = [&](const at::Tensor& x) { return whole_sequence(x).index_select(2, sequence_order); };
  // Sorted, the rows are the whole sequence: its documents apply as they are.
  at::Tensor out = compat::causal_attention(sorted(q), sorted(key), sorted(value), documents);
  // Back to rank order, then each rank's piece of every head.
  return all_to_all_autograd(out.index_select(2, rank_order).contiguous(), comm, 2, 1);
}

}  // namespace titan::context_parallel
