// Dispatch and combine by all-to-all. Each rank sorts its (token, slot)
// rows by expert (the base dispatcher), tells every ep rank how many rows it
// has for each of that rank's experts (an equal-split all-to-all of the
// counts), then sends the rows (all-to-all with those splits, autograd: the
// gradients come back the same way). Rows arrive grouped by sender; one
// fixed permutation regroups them by local expert for GroupedExperts, and
// its inverse undoes it in combine, so every row has one place both ways.
#include "ep_dispatcher.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "titan/autograd_collectives.hpp"
#include "titan/error.hpp"
#include "titan/host_to_device.hpp"

namespace titan::expert_parallel {

namespace {

// What dispatch leaves for combine (DispatchedTokens::exchange).
struct Exchange {
  std::vector<int64_t> send_rows;  // rows this rank sent to each ep rank
  std::vector<int64_t> recv_rows;  // rows it received from each
  at::Tensor by_expert;            // received rows in local-expert order (indices into the arrival order)
  at::Tensor by_sender;            // the inverse permutation
};

// Identity on `rows` whose backward also reaches `anchor` (with no
// gradient): the combine's all-to-all then has a backward whenever the
// dispatch's rows need one, and that backward leads on to the dispatch's,
// whatever experts sit between. Without it, experts whose output carries no
// gradient (no rows on this rank) drop both backward all-to-alls on this
// rank only, and its peers wait in them forever.
struct TiedToDispatch : torch::autograd::Function<TiedToDispatch> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& rows, const at::Tensor& anchor) {
    return rows.view_as(rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

DispatchedTokens AllToAllDispatcher::dispatch(const at::Tensor& x, const at::Tensor& selected, int64_t num_experts,
                                              const at::Tensor& row_scale) {
  const int64_t ranks = ep_.size();
  if (num_experts % ranks != 0) {
    throw Error("expert_parallel: " + path_ + " has " + std::to_string(num_experts) +
                " experts, not divisible by expert_parallel_degree " + std::to_string(ranks));
  }
  const int64_t local = num_experts / ranks;
  DispatchedTokens sorted = sort_by_expert(x, selected, row_scale);
  CallSite site("expert_parallel dispatch " + path_);

  // This rank's rows per expert, exchanged on the device; both come to the
  // host together: the layer's one read (the splits must be host numbers).
  at::Tensor mine = count_per_expert(selected, num_experts);
  at::Tensor both = at::cat({mine, ep_.all_to_all(mine)}).cpu();
  sorted.tokens_per_expert.assign(both.data_ptr<int64_t>(), both.data_ptr<int64_t>() + num_experts);
  // count[s * local + l]: the rows rank s has for this rank's expert l.
  const int64_t* count = both.data_ptr<int64_t>() + num_experts;

  auto exchange = std::make_shared<Exchange>();
  exchange->send_rows.assign(static_cast<size_t>(ranks), 0);
  exchange->recv_rows.assign(static_cast<size_t>(ranks), 0);
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t l = 0; l < local; ++l) {
      exchange->send_rows[static_cast<size_t>(r)] += sorted.tokens_per_expert[static_cast<size_t>(r * local + l)];
      exchange->recv_rows[static_cast<size_t>(r)] += count[r * local + l];
    }
  }
  // Arrival order: sender 0's rows for experts 0..local-1, then sender 1's, ...
  std::vector<int64_t> start(static_cast<size_t>(ranks * local));
  int64_t arrived_rows = 0;
  for (int64_t i = 0; i < ranks * local; ++i) {
    start[static_cast<size_t>(i)] = arrived_rows;
    arrived_rows += count[i];
  }
  std::vector<int64_t> by_expert, by_sender(static_cast<size_t>(arrived_rows));
  by_expert.reserve(static_cast<size_t>(arrived_rows));
  DispatchedTokens out;
  out.tokens_per_expert.assign(static_cast<size_t>(local), 0);
  for (int64_t l = 0; l < local; ++l) {
    for (int64_t s = 0; s < ranks; ++s) {
      const int64_t block = s * local + l;
      for (int64_t row = 0; row < count[block]; ++row) {
        by_sender[static_cast<size_t>(start[static_cast<size_t>(block)] + row)] = static_cast<int64_t>(by_expert.size());
        by_expert.push_back(start[static_cast<size_t>(block)] + row);
      }
      out.tokens_per_expert[static_cast<size_t>(l)] += count[block];
    }
  }
  const auto index_options = at::TensorOptions().dtype(at::kLong);
  exchange->by_expert = host_to_device(at::tensor(by_expert, index_options), x.device());
  exchange->by_sender = host_to_device(at::tensor(by_sender, index_options), x.device());

  at::Tensor arrived = all_to_all_v_autograd(sorted.tokens, ep_, exchange->send_rows, exchange->recv_rows);
  out.tokens = arrived.index_select(0, exchange->by_expert);
  out.order = sorted.order;
  out.exchange = exchange;
  return out;
}

at::Tensor AllToAllDispatcher::combine(const at::Tensor& expert_output, const DispatchedTokens& dispatched,
                                       int64_t tokens, int64_t top_k) {
  auto exchange = std::static_pointer_cast<const Exchange>(dispatched.exchange);
  if (!exchange) throw Error("expert_parallel: " + path_ + ": combine of tokens this dispatcher did not dispatch");
  CallSite site("expert_parallel combine " + path_);
  at::Tensor by_sender = expert_output.index_select(0, exchange->by_sender);
  if (at::GradMode::is_enabled() && dispatched.tokens.requires_grad()) {
    by_sender = TiedToDispatch::apply(by_sender, dispatched.tokens);
  }
  at::Tensor returned = all_to_all_v_autograd(by_sender, ep_, exchange->recv_rows, exchange->send_rows);
  return TokenDispatcher::combine(returned, dispatched, tokens, top_k);
}

}  // namespace titan::expert_parallel
