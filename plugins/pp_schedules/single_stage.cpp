// One stage per rank (rank r runs stage r): GPipe (all forwards, then all
// backwards) and 1F1B (after a warm-up, one forward per backward, so a rank
// holds at most pp - r microbatches' activations).
#include <algorithm>

#include "schedules.h"

namespace titan::pp_schedules {

RankActions gpipe(const PipelineShape& shape) {
  RankActions ranks(static_cast<size_t>(shape.ranks));
  for (int64_t r = 0; r < shape.ranks; ++r) {
    auto& out = ranks[static_cast<size_t>(r)];
    for (int64_t m = 0; m < shape.microbatches; ++m) out.push_back({ActionType::forward, r, m});
    for (int64_t m = 0; m < shape.microbatches; ++m) out.push_back({ActionType::full_backward, r, m});
  }
  return ranks;
}

RankActions one_f_one_b(const PipelineShape& shape) {
  RankActions ranks(static_cast<size_t>(shape.ranks));
  for (int64_t r = 0; r < shape.ranks; ++r) {
    auto& out = ranks[static_cast<size_t>(r)];
    // The last stage starts backward after one forward; each stage upstream one more.
    const int64_t warmup = std::min(shape.microbatches, shape.ranks - r);
    for (int64_t m = 0; m < warmup; ++m) out.push_back({ActionType::forward, r, m});
    for (int64_t m = 0; m < shape.microbatches; ++m) {
      out.push_back({ActionType::full_backward, r, m});
      if (warmup + m < shape.microbatches) out.push_back({ActionType::forward, r, warmup + m});
    }
  }
  return ranks;
}

}  // namespace titan::pp_schedules
