// The `unpermuted_ep` mutant's dispatcher, linked in place of
// plugins/expert_parallel/ep_dispatcher.cpp: the rows and the counts travel
// as in the real one, but the arrived rows (grouped by sender, then expert)
// go to the grouped GEMM as they came, under splits per local expert: the
// regroup by expert (TorchTitan's permute after the all-to-all) is left out,
// and combine sends the rows back unpermuted. With one ep rank, or one
// expert per rank, nothing changes; with two ranks of 4 experts each most
// rows meet another expert's weights. Shapes stay right, the numbers do not.
#include "ep_dispatcher.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "titan/autograd_collectives.hpp"

namespace titan::expert_parallel {

namespace {

struct Exchange {
  std::vector<int64_t> send_rows, recv_rows;
};

}  // namespace

DispatchedTokens AllToAllDispatcher::dispatch(const at::Tensor& x, const at::Tensor& selected, int64_t num_experts,
                                              const at::Tensor& row_scale) {
  const int64_t ranks = ep_.size(), local = num_experts / ranks;
  DispatchedTokens sorted = TokenDispatcher::dispatch(x, selected, num_experts, row_scale);
  CallSite site("expert_parallel dispatch " + path_);
  at::Tensor mine = at::tensor(sorted.tokens_per_expert, at::TensorOptions().dtype(at::kLong)).to(x.device());
  at::Tensor counts = ep_.all_to_all(mine).cpu();
  const int64_t* count = counts.data_ptr<int64_t>();
  auto exchange = std::make_shared<Exchange>();
  exchange->send_rows.assign(static_cast<size_t>(ranks), 0);
  exchange->recv_rows.assign(static_cast<size_t>(ranks), 0);
  DispatchedTokens out;
  out.tokens_per_expert.assign(static_cast<size_t>(local), 0);
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t l = 0; l < local; ++l) {
      exchange->send_rows[static_cast<size_t>(r)] += sorted.tokens_per_expert[static_cast<size_t>(r * local + l)];
      exchange->recv_rows[static_cast<size_t>(r)] += count[r * local + l];
      out.tokens_per_expert[static_cast<size_t>(l)] += count[r * local + l];
    }
  }
  out.tokens = all_to_all_v_autograd(sorted.tokens, ep_, exchange->send_rows, exchange->recv_rows);
  out.order = sorted.order;
  out.exchange = exchange;
  return out;
}

at::Tensor AllToAllDispatcher::combine(const at::Tensor& expert_output, const DispatchedTokens& dispatched,
                                       int64_t tokens, int64_t top_k) {
  auto exchange = std::static_pointer_cast<const Exchange>(dispatched.exchange);
  CallSite site("expert_parallel combine " + path_);
  at::Tensor returned = all_to_all_v_autograd(expert_output, ep_, exchange->recv_rows, exchange->send_rows);
  return TokenDispatcher::combine(returned, dispatched, tokens, top_k);
}

}  // namespace titan::expert_parallel
