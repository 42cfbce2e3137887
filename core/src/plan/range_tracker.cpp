// The dry run's place in the step: the ranges ProfileRange opens (forward,
// backward, pipeline actions, activation checkpointing's recompute) kept
// per rank, for where its memory peaks and which FLOPs are recompute.
// Only user ranges are observed and no inputs recorded: the FLOPs are
// counted by the Meta kernels themselves (meta_kernels.cpp), which costs
// nothing on the ops that do no math.
#include <ATen/record_function.h>

#include <mutex>

#include "dry_rank.hpp"
#include "titan/profile_range.hpp"

namespace titan {

namespace {

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  DryRank* rank = current_dry_rank();
  if (!rank) return nullptr;
  DryRankTally& tally = rank->tally;
  tally.ranges.emplace_back(fn.name());
  if (tally.ranges.back() == kRecomputeRange) ++tally.recomputing;
  return nullptr;
}

void on_end(const at::RecordFunction& /*fn*/, at::ObserverContext* /*context*/) {
  DryRank* rank = current_dry_rank();
  if (!rank) return;
  DryRankTally& tally = rank->tally;
  if (tally.ranges.empty()) return;
  if (tally.ranges.back() == kRecomputeRange) --tally.recomputing;
  tally.ranges.pop_back();
}

}  // namespace

void DryRankTally::add_flops(double count) {
  flops += count;
  if (recomputing > 0) recompute_flops += count;
}

void install_range_tracker() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end).scopes({at::RecordScope::USER_SCOPE}));
  });
}

}  // namespace titan
