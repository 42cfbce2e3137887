// The loss is log(sum_v exp(z_v - m)) - (z_target - m) with m the global
// max; m is a constant for autograd (it cancels), the two sums are
// all-reduces whose adjoint is the identity: every rank repeats the same
// loss, so each receives the whole gradient of its own partial sum.
#include "vocab_parallel_cross_entropy.h"

#include <ATen/ATen.h>

#include "titan/autograd_collectives.hpp"
#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan::loss_parallel {

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, Comm& group) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) || logits.size(1) != labels.size(1)) {
    throw Error("loss_parallel: expected logits [batch, seq, vocab shard] and labels [batch, seq], got " +
                c10::str(logits.sizes()) + " and " + c10::str(labels.sizes()));
  }
  at::Tensor z = logits.flatten(0, 1).to(at::kFloat);  // [tokens, local vocab]
  at::Tensor target = labels.flatten(0, 1);
  const int64_t local_vocab = z.size(1);
  const int64_t vocab_begin = local_vocab * group.rank();

  at::Tensor max = std::get<0>(z.detach().max(1, /*keepdim=*/true));
  {
    CallSite site("loss_parallel all_reduce max");
    group.all_reduce(max, ReduceOp::max);
  }
  at::Tensor shifted = z - max;
  at::Tensor sum_exp = shifted.exp().sum(1);
  at::Tensor owned = (target >= vocab_begin) & (target < vocab_begin + local_vocab);
  at::Tensor local_target = (target - vocab_begin).masked_fill(~owned, 0);
  at::Tensor target_logit = shifted.gather(1, local_target.unsqueeze(1)).squeeze(1).masked_fill(~owned, 0);
  {
    CallSite site("loss_parallel all_reduce sum_exp");
    sum_exp = all_reduce_autograd(sum_exp, group);
  }
  {
    CallSite site("loss_parallel all_reduce target logit");
    target_logit = all_reduce_autograd(target_logit, group);
  }
  at::Tensor per_token = sum_exp.log() - target_logit;
  at::Tensor valid = target != -100;
  return per_token.masked_fill(~valid, 0).sum() / valid.sum().to(at::kFloat);
}

}  // namespace titan::loss_parallel
