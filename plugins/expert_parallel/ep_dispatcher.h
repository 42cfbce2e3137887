// The all-to-all token dispatcher expert parallelism puts at each
// "...moe.dispatcher": tokens go to the ep rank holding their expert and
// come back the same way (TorchTitan's ExpertParallel input/output hooks).
#pragma once
#include <string>

#include "titan/comm.hpp"
#include "titan/moe.hpp"

namespace titan::expert_parallel {

class AllToAllDispatcher : public TokenDispatcher {
 public:
  // `ep`: the group whose rank r holds experts [r * E/ep, (r + 1) * E/ep).
  AllToAllDispatcher(Comm& ep, std::string path) : ep_(ep), path_(std::move(path)) {}
  // Sorted by expert locally (the base dispatcher), per-expert counts
  // exchanged, rows sent to their experts' ranks, regrouped by local expert.
  DispatchedTokens dispatch(const at::Tensor& x, const at::Tensor& selected, int64_t num_experts,
                            const at::Tensor& row_scale) override;
  // The exact reverse: rows regrouped by sender, sent back, unsorted.
  at::Tensor combine(const at::Tensor& expert_output, const DispatchedTokens& dispatched, int64_t tokens,
                     int64_t top_k) override;

 private:
  Comm& ep_;
  std::string path_;
};

}  // namespace titan::expert_parallel
