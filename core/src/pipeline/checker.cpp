// The static check of a pipeline schedule: every rank's full list (compute
// and point-to-point) is run together on a simulated clock before any
// process group exists. Sends never block; a recv waits for its matching
// send; any other action that cannot run is a mistake in the list itself.
// The same walk yields the theoretical timeline and bubble.
#include <algorithm>
#include <sstream>

#include "titan/error.hpp"
#include "titan/pipeline_program.hpp"

namespace titan {

namespace {

struct Where {
  int64_t rank = -1;
  int64_t step = -1;
};

// What has happened to one (stage, microbatch) so far.
struct Cell {
  Where forward, input_grad, weight_grad, full_backward;
  Where send_forward, recv_forward, send_backward, recv_backward;
  int64_t send_forward_tick = 0, send_backward_tick = 0;
};

int64_t cost_of(const Action& action, const ActionCosts& all) {
  const bool own = action.stage >= 0 && static_cast<size_t>(action.stage) < all.stages.size();
  const ActionCosts& costs = own ? all.stages[static_cast<size_t>(action.stage)] : all;
  switch (action.type) {
    case ActionType::forward: return costs.forward;
    case ActionType::backward_input: return costs.backward_input;
    case ActionType::backward_weight: return costs.backward_weight;
    case ActionType::full_backward: return costs.full_backward;
    default: return 0;
  }
}

class Checker {
 public:
  Checker(const RankActions& actions, StagePlacement placement, const PipelineShape& shape, std::string label,
          const ActionCosts& costs)
      : actions_(actions), placement_(placement), shape_(shape), label_(std::move(label)), costs_(costs) {}

  PipelineTimeline run() {
    check_static();
    cells_.assign(static_cast<size_t>(shape_.stages * shape_.microbatches), Cell{});
    const size_t ranks = actions_.size();
    std::vector<size_t> next(ranks, 0);
    std::vector<int64_t> clock(ranks, 0);
    timeline_.ranks.assign(ranks, {});
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t r = 0; r < ranks; ++r) {
        while (next[r] < actions_[r].size()) {
          const Action& action = actions_[r][next[r]];
          if (blocked(action)) break;
          step(static_cast<int64_t>(r), static_cast<int64_t>(next[r]), action, clock[r]);
          ++next[r];
          progress = true;
        }
      }
    }
    for (size_t r = 0; r < ranks; ++r) {
      if (next[r] < actions_[r].size()) deadlock(next);
    }
    check_complete();
    int64_t busy = 0;
    for (size_t r = 0; r < ranks; ++r) {
      timeline_.makespan = std::max(timeline_.makespan, clock[r]);
      for (const auto& timed : timeline_.ranks[r]) busy += timed.end - timed.start;
    }
    const double slots = static_cast<double>(ranks) * static_cast<double>(timeline_.makespan);
    timeline_.bubble_fraction = slots > 0 ? 1.0 - static_cast<double>(busy) / slots : 0.0;
    return timeline_;
  }

 private:
  int64_t rank_of(int64_t stage) const { return stage_to_rank(placement_, shape_, stage); }
  Cell& cell(int64_t stage, int64_t microbatch) {
    return cells_[static_cast<size_t>(stage * shape_.microbatches + microbatch)];
  }
  static std::string describe(const Action& action) {
    return action.to_string() + ", microbatch " + std::to_string(action.microbatch);
  }
  static std::string at(Where where) {
    return "rank " + std::to_string(where.rank) + " step " + std::to_string(where.step);
  }

  [[noreturn]] void fail(int64_t rank, int64_t step, const Action& action, const std::string& why) const {
    throw Error(label_ + " (" + shape_.to_string() + ", " + placement_name(placement_) + " placement): rank " +
                std::to_string(rank) + ", step " + std::to_string(step) + " (" + describe(action) + "): " + why);
  }

  // Shape, ranges, placement and the direction of every comm action, before anything runs.
  void check_static() const {
    if (static_cast<int64_t>(actions_.size()) != shape_.ranks) {
      throw Error(label_ + ": the schedule has lists for " + std::to_string(actions_.size()) + " ranks, but " +
                  kPipelineDegreeKey + " is " + std::to_string(shape_.ranks));
    }
    const int64_t last = shape_.stages - 1;
    for (size_t r = 0; r < actions_.size(); ++r) {
      const int64_t rank = static_cast<int64_t>(r);
      for (size_t i = 0; i < actions_[r].size(); ++i) {
        const Action& a = actions_[r][i];
        const int64_t step = static_cast<int64_t>(i);
        if (a.stage < 0 || a.stage > last) {
          fail(rank, step, a, "stage " + std::to_string(a.stage) + " does not exist (stages 0.." +
                                  std::to_string(last) + ")");
        }
        if (a.microbatch < 0 || a.microbatch >= shape_.microbatches) {
          fail(rank, step, a, "microbatch " + std::to_string(a.microbatch) + " does not exist (microbatches 0.." +
                                  std::to_string(shape_.microbatches - 1) + ")");
        }
        if (rank_of(a.stage) != rank) {
          fail(rank, step, a, "stage " + std::to_string(a.stage) + " belongs to rank " +
                                  std::to_string(rank_of(a.stage)) + " under the " + placement_name(placement_) +
                                  " placement, not to rank " + std::to_string(rank));
        }
        auto peer = [&](int64_t stage, const char* what) {
          if (stage < 0 || stage > last) fail(rank, step, a, std::string("stage ") + std::to_string(a.stage) + " has no " + what);
          if (rank_of(stage) == rank) {
            fail(rank, step, a, "stages " + std::to_string(a.stage) + " and " + std::to_string(stage) +
                                    " are both on rank " + std::to_string(rank) +
                                    ": they hand tensors over in memory, with no send or recv");
          }
        };
        switch (a.type) {
          case ActionType::send_forward: peer(a.stage + 1, "next stage to send its output to"); break;
          case ActionType::recv_backward: peer(a.stage + 1, "next stage to receive a gradient from"); break;
          case ActionType::recv_forward: peer(a.stage - 1, "previous stage to receive its input from"); break;
          case ActionType::send_backward: peer(a.stage - 1, "previous stage to send its input gradient to"); break;
          default: break;
        }
      }
    }
  }

  // Only a recv can wait; it waits for the matching send on the peer's rank.
  bool blocked(const Action& a) {
    if (a.type == ActionType::recv_forward) return cell(a.stage - 1, a.microbatch).send_forward.rank < 0;
    if (a.type == ActionType::recv_backward) return cell(a.stage + 1, a.microbatch).send_backward.rank < 0;
    return false;
  }

  void once(Where& slot, int64_t rank, int64_t step, const Action& a, const std::string& what) {
    if (slot.rank >= 0) fail(rank, step, a, what + " a second time (first at " + at(slot) + ")");
    slot = {rank, step};
  }

  // The gradient of the stage's output is here: the loss on the last stage, an earlier local
  // backward of the next stage, or a recv.
  void require_output_grad(int64_t rank, int64_t step, const Action& a) {
    const int64_t s = a.stage, m = a.microbatch;
    if (s == shape_.stages - 1) return;  // the loss, from this stage's own forward
    if (rank_of(s + 1) == rank) {
      Cell& next = cell(s + 1, m);
      if (next.input_grad.rank < 0 && next.full_backward.rank < 0) {
        fail(rank, step, a, "the backward of stage " + std::to_string(s + 1) + " for microbatch " +
                                std::to_string(m) + ", on this rank, has not run yet: its input gradient is this "
                                "backward's input");
      }
    } else if (cell(s, m).recv_backward.rank < 0) {
      fail(rank, step, a, "no " + Action{ActionType::recv_backward, s, m}.to_string() +
                              " before it: the gradient of its output was never received");
    }
  }

  void step(int64_t rank, int64_t step, const Action& a, int64_t& clock) {
    const int64_t s = a.stage, m = a.microbatch;
    Cell& c = cell(s, m);
    const std::string mb = "microbatch " + std::to_string(m) + " of stage " + std::to_string(s);
    switch (a.type) {
      case ActionType::forward:
        if (s > 0) {
          if (rank_of(s - 1) == rank) {
            if (cell(s - 1, m).forward.rank < 0) {
              fail(rank, step, a, "the forward of stage " + std::to_string(s - 1) + " that feeds it, on this rank, "
                                  "has not run yet");
            }
          } else if (c.recv_forward.rank < 0) {
            fail(rank, step, a, "no " + Action{ActionType::recv_forward, s, m}.to_string() +
                                    " before it: its input was never received");
          }
        }
        once(c.forward, rank, step, a, "runs the forward of " + mb);
        break;
      case ActionType::backward_input:
      case ActionType::full_backward: {
        const bool full = a.type == ActionType::full_backward;
        if (c.forward.rank < 0) fail(rank, step, a, "backward of " + mb + " before its forward");
        require_output_grad(rank, step, a);
        if (c.input_grad.rank >= 0 || c.full_backward.rank >= 0) {
          Where first = c.input_grad.rank >= 0 ? c.input_grad : c.full_backward;
          fail(rank, step, a, "a second backward of " + mb + " (first at " + at(first) + ")");
        }
        (full ? c.full_backward : c.input_grad) = {rank, step};
        break;
      }
      case ActionType::backward_weight:
        if (c.full_backward.rank >= 0) {
          fail(rank, step, a, "W after a full backward (B) of " + mb + " at " + at(c.full_backward) +
                                  ", which already computed the weight gradient");
        }
        if (c.input_grad.rank < 0) fail(rank, step, a, "W of " + mb + " before its I (backward_input)");
        once(c.weight_grad, rank, step, a, "runs the weight gradient (W) of " + mb);
        break;
      case ActionType::send_forward:
        if (c.forward.rank < 0) fail(rank, step, a, "sends the output of " + mb + " before its forward ran");
        once(c.send_forward, rank, step, a, "sends the output of " + mb);
        c.send_forward_tick = clock;
        break;
      case ActionType::send_backward:
        if (c.input_grad.rank < 0 && c.full_backward.rank < 0) {
          fail(rank, step, a, "sends the input gradient of " + mb + " before its backward (I or B) ran");
        }
        once(c.send_backward, rank, step, a, "sends the input gradient of " + mb);
        c.send_backward_tick = clock;
        break;
      case ActionType::recv_forward:
        once(c.recv_forward, rank, step, a, "receives the input of " + mb);
        clock = std::max(clock, cell(s - 1, m).send_forward_tick);
        break;
      case ActionType::recv_backward:
        once(c.recv_backward, rank, step, a, "receives the output gradient of " + mb);
        clock = std::max(clock, cell(s + 1, m).send_backward_tick);
        break;
    }
    const int64_t start = clock;
    clock += cost_of(a, costs_);
    timeline_.ranks[static_cast<size_t>(rank)].push_back({a, start, clock});
  }

  // Every blocked rank, what it waits for, and where the sender is.
  [[noreturn]] void deadlock(const std::vector<size_t>& next) {
    std::ostringstream why;
    why << label_ << " (" << shape_.to_string() << ", " << placement_name(placement_)
        << " placement) deadlocks: no rank can advance.";
    for (size_t r = 0; r < actions_.size(); ++r) {
      if (next[r] >= actions_[r].size()) continue;
      const Action& a = actions_[r][next[r]];
      const bool forward = a.type == ActionType::recv_forward;
      const Action send{forward ? ActionType::send_forward : ActionType::send_backward,
                        forward ? a.stage - 1 : a.stage + 1, a.microbatch};
      const int64_t peer = rank_of(send.stage);
      why << "\n  rank " << r << " blocks forever at step " << next[r] << " (" << describe(a) << "): it waits for "
          << send.to_string() << " from rank " << peer << ", ";
      const auto& list = actions_[static_cast<size_t>(peer)];
      const size_t from = next[static_cast<size_t>(peer)];
      const bool later = std::find(list.begin() + static_cast<std::ptrdiff_t>(std::min(from, list.size())),
                                   list.end(), send) != list.end();
      if (from >= list.size()) {
        why << "which finished its list without sending it (a missing send)";
      } else if (!later) {
        why << "whose list never sends it (a missing send); rank " << peer << " is at step " << from << " ("
            << describe(list[from]) << ")";
      } else {
        why << "which is itself blocked at step " << from << " (" << describe(list[from]) << ")";
      }
    }
    throw Error(why.str());
  }

  // After the walk: every forward and backward ran once, and every send was received.
  void check_complete() {
    auto where = [&](int64_t stage) { return "rank " + std::to_string(rank_of(stage)); };
    for (int64_t s = 0; s < shape_.stages; ++s) {
      for (int64_t m = 0; m < shape_.microbatches; ++m) {
        const Cell& c = cell(s, m);
        const std::string mb = "microbatch " + std::to_string(m) + " of stage " + std::to_string(s);
        auto refuse = [&](const std::string& why) {
          throw Error(label_ + " (" + shape_.to_string() + ", " + placement_name(placement_) + " placement): " +
                      where(s) + ", microbatch " + std::to_string(m) + ": " + why);
        };
        if (c.forward.rank < 0) refuse("never runs " + Action{ActionType::forward, s, m}.to_string() + ": the forward of " + mb + " is missing");
        if (c.full_backward.rank < 0 && c.input_grad.rank < 0) {
          refuse("never runs a backward (" + Action{ActionType::full_backward, s, m}.to_string() + ", or " +
                 Action{ActionType::backward_input, s, m}.to_string() + " and " +
                 Action{ActionType::backward_weight, s, m}.to_string() + ") of " + mb);
        }
        if (c.input_grad.rank >= 0 && c.weight_grad.rank < 0) {
          refuse("runs " + Action{ActionType::backward_input, s, m}.to_string() + " at " + at(c.input_grad) +
                 " but never " + Action{ActionType::backward_weight, s, m}.to_string() +
                 ": the weight gradient of " + mb + " is never computed");
        }
        if (c.send_forward.rank >= 0 && cell(s + 1, m).recv_forward.rank < 0) {
          refuse(Action{ActionType::send_forward, s, m}.to_string() + " at " + at(c.send_forward) +
                 " has no matching " + Action{ActionType::recv_forward, s + 1, m}.to_string() + " on " +
                 where(s + 1));
        }
        if (c.send_backward.rank >= 0 && cell(s - 1, m).recv_backward.rank < 0) {
          refuse(Action{ActionType::send_backward, s, m}.to_string() + " at " + at(c.send_backward) +
                 " has no matching " + Action{ActionType::recv_backward, s - 1, m}.to_string() + " on " +
                 where(s - 1));
        }
        if (s + 1 < shape_.stages && rank_of(s + 1) != rank_of(s) && c.send_forward.rank < 0) {
          refuse("the output of " + mb + " is never sent to stage " + std::to_string(s + 1) + " (no " +
                 Action{ActionType::send_forward, s, m}.to_string() + ")");
        }
        if (s > 0 && rank_of(s - 1) != rank_of(s) && c.send_backward.rank < 0) {
          refuse("the input gradient of " + mb + " is never sent to stage " + std::to_string(s - 1) + " (no " +
                 Action{ActionType::send_backward, s, m}.to_string() + ")");
        }
      }
    }
  }

  const RankActions& actions_;
  StagePlacement placement_;
  PipelineShape shape_;
  std::string label_;
  ActionCosts costs_;
  std::vector<Cell> cells_;
  PipelineTimeline timeline_;
};

}  // namespace

PipelineTimeline check_pipeline(const RankActions& actions, StagePlacement placement, const PipelineShape& shape,
                                const std::string& label, const ActionCosts& costs) {
  if (shape.ranks < 1 || shape.stages < 1 || shape.microbatches < 1) {
    throw Error(label + ": the pipeline shape (" + shape.to_string() + ") needs at least one rank, stage and microbatch");
  }
  return Checker(actions, placement, shape, label, costs).run();
}

}  // namespace titan
