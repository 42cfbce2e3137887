// The thread's dry-run rank and where its memory peaks.
#include "dry_rank.hpp"

#include <torch/csrc/autograd/engine.h>

namespace titan {

namespace {
thread_local DryRank* current = nullptr;
}

DryRank* current_dry_rank() { return current; }

DryRankScope::DryRankScope(DryRank& rank) : tally_(rank.tally) { current = &rank; }
DryRankScope::~DryRankScope() { current = nullptr; }

std::string DryRankTally::where() const {
  std::string text = phase;
  for (const auto& range : ranges) text += " / " + range;
  if (in_backward && (ranges.empty() || ranges.back() != "backward")) text += " / autograd backward";
  const std::string& site = CallSite::current();
  if (!site.empty() && site != phase) text += " (" + site + ")";
  return text;
}

}  // namespace titan
