// The loss is log(sum_v exp(z_v - m)) - (z_target - m) with m the global
// max: two all-reduces of per-token sums. One autograd function, as
// Megatron's: the forward keeps only the softmax of the local slice, and
// the backward turns it in place into the gradient (softmax - one-hot) /
// tokens, with no communication; so a rank's peak is about one
// [tokens, vocab / ranks] float buffer beyond the logits themselves.
#include "vocab_parallel_cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan::loss_parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  // logits [tokens, local vocab], target [tokens] of global ids.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target,
                            int64_t group_handle) {
    Comm& group = *reinterpret_cast<Comm*>(group_handle);
    at::Tensor z = logits.to(at::kFloat);
    const int64_t local_vocab = z.size(1);
    const int64_t vocab_begin = local_vocab * group.rank();
    at::Tensor max = std::get<0>(z.max(1, /*keepdim=*/true));
    {
      CallSite site("loss_parallel all_reduce max");
      group.all_reduce(max, ReduceOp::max);
    }
    at::Tensor owned = (target >= vocab_begin) & (target < vocab_begin + local_vocab);
    at::Tensor local_target = (target - vocab_begin).masked_fill(~owned, 0);
    // [tokens, 2]: sum of exp(z - m) and the target's z - m (0 where another rank owns it).
    at::Tensor softmax = z - max;
    at::Tensor sums = at::stack({at::zeros({z.size(0)}, z.options()),
                                 softmax.gather(1, local_target.unsqueeze(1)).squeeze(1).masked_fill(~owned, 0)},
                                1);
    softmax.exp_();
    sums.select(1, 0).copy_(softmax.sum(1));
    {
      CallSite site("loss_parallel all_reduce sum_exp and target logit");
      group.all_reduce(sums, ReduceOp::sum);
    }
    at::Tensor sum_exp = sums.select(1, 0);
    softmax.div_(sum_exp.unsqueeze(1));
    at::Tensor valid = target != -100;
    at::Tensor count = valid.sum().to(at::kFloat).clamp_min(1);
    at::Tensor per_token = (sum_exp.log() - sums.select(1, 1)).masked_fill(~valid, 0);
    ctx->save_for_backward({softmax, local_target, owned, valid, count});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return per_token.sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0];  // the softmax, turned into the gradient in place (backward runs once)
    const at::Tensor &local_target = saved[1], &owned = saved[2], &valid = saved[3], &count = saved[4];
    at::Tensor target_column = grad.gather(1, local_target.unsqueeze(1));
    grad.scatter_(1, local_target.unsqueeze(1), target_column - owned.unsqueeze(1).to(grad.scalar_type()));
    grad.mul_((valid.to(grad.scalar_type()) * (grads[0] / count)).unsqueeze(1));
    auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, Comm& group) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) || logits.size(1) != labels.size(1)) {
    throw Error("loss_parallel: expected logits [batch, seq, vocab shard] and labels [batch, seq], got " +
                c10::str(logits.sizes()) + " and " + c10::str(labels.sizes()));
  }
  return VocabParallelCrossEntropy::apply(logits.flatten(0, 1), labels.flatten(0, 1),
                                          reinterpret_cast<int64_t>(&group));
}

}  // namespace titan::loss_parallel
