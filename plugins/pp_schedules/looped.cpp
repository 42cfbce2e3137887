// Several stages per rank on the loop placement (rank r runs r, r+pp, ...):
// Interleaved1F1B (depth first: microbatches move through the local stages
// in rounds of pp), InterleavedZeroBubble (the same with the backward split
// into I, sent upstream at once, and W, run later to fill the bubble), and
// LoopedBFS (breadth first: every microbatch through one local stage before
// the next).
#include <algorithm>
#include <map>

#include "schedules.h"

namespace titan::pp_schedules {

namespace {

// One rank of the interleaved schedules, after PyTorch's _get_1f1b_rank_ops:
// a warm-up of forwards, then one forward per backward, then the remaining
// backwards. Zero bubble: rank r defers the weight gradients of its first r
// backwards, then runs one W after each I, and the rest at the end.
std::vector<Action> interleaved_rank(const PipelineShape& shape, int64_t rank, bool zero_bubble) {
  const int64_t p = shape.ranks;
  const int64_t local = shape.stages / p;
  const int64_t m = shape.microbatches;
  const int64_t rounds = std::max<int64_t>(1, m / p);
  const int64_t per_round = m / rounds;
  const int64_t total = local * m;  // forwards (and backwards) on this rank
  // Each hop from the last rank adds two forwards of warm-up (one with zero bubble, whose I is quicker to come back).
  const int64_t warmup = std::min((local - 1) * per_round + (zero_bubble ? 1 : 2) * (p - 1 - rank), total);
  auto forward_stage = [&](int64_t k) { return ((k / per_round) % local) * p + rank; };
  auto backward_stage = [&](int64_t j) { return (local - 1 - (j / per_round) % local) * p + rank; };

  std::vector<Action> out;
  std::map<int64_t, int64_t> next_forward, next_backward, next_weight;
  std::vector<int64_t> backward_stages;  // in backward order, for the W that follows each I
  size_t weights = 0;
  auto forward = [&](int64_t k) {
    const int64_t s = forward_stage(k);
    out.push_back({ActionType::forward, s, next_forward[s]++});
  };
  auto backward = [&](int64_t j) {
    const int64_t s = backward_stage(j);
    out.push_back({zero_bubble ? ActionType::backward_input : ActionType::full_backward, s, next_backward[s]++});
    backward_stages.push_back(s);
  };
  auto weight = [&] {
    const int64_t s = backward_stages[weights++];
    out.push_back({ActionType::backward_weight, s, next_weight[s]++});
  };
  for (int64_t k = 0; k < warmup; ++k) forward(k);
  for (int64_t j = 0; j < total; ++j) {
    if (warmup + j < total) forward(warmup + j);
    backward(j);
    if (zero_bubble && j >= rank) weight();
  }
  while (zero_bubble && weights < backward_stages.size()) weight();
  return out;
}

RankActions interleaved(const PipelineShape& shape, bool zero_bubble) {
  RankActions ranks;
  for (int64_t r = 0; r < shape.ranks; ++r) ranks.push_back(interleaved_rank(shape, r, zero_bubble));
  return ranks;
}

}  // namespace

RankActions interleaved_1f1b(const PipelineShape& shape) { return interleaved(shape, false); }

RankActions interleaved_zero_bubble(const PipelineShape& shape) { return interleaved(shape, true); }

RankActions looped_bfs(const PipelineShape& shape) {
  RankActions ranks(static_cast<size_t>(shape.ranks));
  for (int64_t r = 0; r < shape.ranks; ++r) {
    auto& out = ranks[static_cast<size_t>(r)];
    for (int64_t s = r; s < shape.stages; s += shape.ranks) {
      for (int64_t m = 0; m < shape.microbatches; ++m) out.push_back({ActionType::forward, s, m});
    }
    // Backwards in reverse: the stage and microbatch whose forward finished last go first.
    for (int64_t s = shape.stages - shape.ranks + r; s >= 0; s -= shape.ranks) {
      for (int64_t m = shape.microbatches - 1; m >= 0; --m) out.push_back({ActionType::full_backward, s, m});
    }
  }
  return ranks;
}

}  // namespace titan::pp_schedules
