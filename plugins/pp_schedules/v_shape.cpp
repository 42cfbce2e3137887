// Two stages per rank on the V placement (rank r runs stages r and
// 2pp-1-r, so the last stage sits on rank 0 beside the first and the turn
// from forward to backward happens on one rank): ZBVZeroBubble (the ZB-V
// schedule of arXiv 2401.10241) and DualPipeV (DeepSeek's DualPipe folded
// onto a V, as PyTorch's ScheduleDualPipeV).
#include <algorithm>
#include <deque>
#include <map>

#include "schedules.h"

namespace titan::pp_schedules {

namespace {

std::vector<Action> zbv_rank(const PipelineShape& shape, int64_t rank) {
  const int64_t p = shape.ranks;
  // The pattern needs 2pp-1 microbatches to reach its steady state; with fewer, the ones past the
  // end are generated and dropped, which keeps the order of the rest.
  const int64_t n = std::max(2 * p - 1, shape.microbatches);
  const int64_t down = rank, up = 2 * p - 1 - rank;  // the V's descending and ascending stage
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<Action> out;
  auto add = [&](ActionType type, int64_t stage, int64_t microbatch) { out.push_back({type, stage, microbatch}); };
  for (int64_t i = 0; i < 2 * (p - rank) - 1; ++i) add(ActionType::forward, down, f0++);
  for (int64_t i = 0; i < rank; ++i) {
    add(ActionType::forward, up, f1++);
    add(ActionType::forward, down, f0++);
  }
  for (int64_t i = 0; i < p - rank; ++i) {
    add(ActionType::forward, up, f1++);
    add(ActionType::backward_input, up, b1);
    add(ActionType::backward_weight, up, b1++);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(ActionType::forward, down, f0++);
    add(ActionType::backward_input, down, b0);
    add(ActionType::backward_weight, down, b0++);
    add(ActionType::forward, up, f1++);
    add(ActionType::backward_input, up, b1);
    add(ActionType::backward_weight, up, b1++);
  }
  int64_t w0 = b0, w1 = b1;
  for (int64_t i = 0; i < rank; ++i) {
    add(ActionType::backward_input, down, b0++);
    add(ActionType::backward_input, up, b1++);
  }
  for (int64_t i = 0; i < p - rank; ++i) {
    add(ActionType::backward_input, down, b0++);
    add(ActionType::backward_weight, down, w0++);
  }
  while (w1 < b1) add(ActionType::backward_weight, up, w1++);
  while (w0 < b0) add(ActionType::backward_weight, down, w0++);
  out.erase(std::remove_if(out.begin(), out.end(),
                           [&](const Action& a) { return a.microbatch >= shape.microbatches; }),
            out.end());
  return out;
}

// PyTorch's overlapped F+B pairs are written as the F then the B: the
// executor runs them one after the other, as PyTorch's runtime does.
std::vector<Action> dual_pipe_v_rank(const PipelineShape& shape, int64_t rank) {
  const int64_t p = shape.ranks;
  const int64_t m = shape.microbatches;
  const int64_t down = rank, up = 2 * p - 1 - rank;
  std::map<int64_t, int64_t> forwards, backwards;  // next microbatch per stage
  std::deque<Action> deferred_weights;             // W of each I, oldest first
  std::vector<Action> out;
  auto forward = [&](int64_t stage) { out.push_back({ActionType::forward, stage, forwards[stage]++}); };
  auto backward = [&](int64_t stage, bool split) {
    const int64_t microbatch = backwards[stage]++;
    out.push_back({split ? ActionType::backward_input : ActionType::full_backward, stage, microbatch});
    if (split) deferred_weights.push_back({ActionType::backward_weight, stage, microbatch});
  };
  auto weight_if_any = [&] {
    if (deferred_weights.empty()) return;
    out.push_back(deferred_weights.front());
    deferred_weights.pop_front();
  };
  for (int64_t i = 0; i < 2 * (p - rank - 1); ++i) forward(down);
  for (int64_t i = 0; i < rank + 1; ++i) {
    forward(down);
    forward(up);
  }
  for (int64_t i = 0; i < p - rank - 1; ++i) {
    backward(up, true);
    weight_if_any();
    forward(up);
  }
  // The main phase: F(down)+B(up), then F(up)+B(down).
  for (int64_t i = 0; i < m - 2 * p + rank + 1; ++i) {
    forward(down);
    backward(up, false);
    forward(up);
    backward(down, false);
  }
  for (int64_t i = 0; i < p - rank - 1; ++i) {
    backward(up, false);
    forward(up);
    backward(down, false);
  }
  // The second half of the last backwards splits off W to fill the drain.
  bool split = false;
  const int64_t last = rank + 1;
  for (int64_t i = 0; i < last; ++i) {
    if (i == last / 2 && rank % 2 == 1) split = true;
    backward(up, split);
    if (i == last / 2 && rank % 2 == 0) split = true;
    backward(down, split);
  }
  for (int64_t i = 0; i < p - rank - 1; ++i) {
    weight_if_any();
    backward(down, split);
  }
  for (int64_t i = 0; i < rank + 1; ++i) weight_if_any();
  return out;
}

}  // namespace

RankActions zbv_zero_bubble(const PipelineShape& shape) {
  RankActions ranks;
  for (int64_t r = 0; r < shape.ranks; ++r) ranks.push_back(zbv_rank(shape, r));
  return ranks;
}

RankActions dual_pipe_v(const PipelineShape& shape) {
  RankActions ranks;
  for (int64_t r = 0; r < shape.ranks; ++r) ranks.push_back(dual_pipe_v_rank(shape, r));
  return ranks;
}

}  // namespace titan::pp_schedules
