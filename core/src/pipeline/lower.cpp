// Lowering compute-only lists to lists with explicit point-to-point actions.
// Each recv sits right before the compute that consumes it, so it blocks no
// earlier than the data dependency itself does: if the lowered lists
// deadlock, the compute order does. An executor may post a recv earlier
// (tags keep the matches apart) and wait for it at this position.
#include <cstdint>

#include "titan/error.hpp"
#include "titan/pipeline_program.hpp"

namespace titan {

RankActions lower_to_comm(const RankActions& compute, StagePlacement placement, const PipelineShape& shape) {
  auto rank_of = [&](int64_t stage) { return stage_to_rank(placement, shape, stage); };
  const int64_t last = shape.stages - 1;
  RankActions lowered(compute.size());
  for (size_t r = 0; r < compute.size(); ++r) {
    const int64_t rank = static_cast<int64_t>(r);
    auto& out = lowered[r];
    for (const Action& action : compute[r]) {
      if (!is_compute(action.type)) {
        throw Error("rank " + std::to_string(rank) + ": '" + action.to_string() +
                    "' in a compute-only list (communication is added by the lowering)");
      }
      const int64_t s = action.stage;
      const int64_t m = action.microbatch;
      // Out-of-range stages pass through untouched; check_pipeline names them.
      const bool in_range = s >= 0 && s <= last;
      const bool upstream_remote = in_range && s > 0 && rank_of(s - 1) != rank;
      const bool downstream_remote = in_range && s < last && rank_of(s + 1) != rank;
      const bool backward = action.type == ActionType::backward_input || action.type == ActionType::full_backward;
      if (action.type == ActionType::forward && upstream_remote) out.push_back({ActionType::recv_forward, s, m});
      if (backward && downstream_remote) out.push_back({ActionType::recv_backward, s, m});
      out.push_back(action);
      if (action.type == ActionType::forward && downstream_remote) out.push_back({ActionType::send_forward, s, m});
      if (backward && upstream_remote) out.push_back({ActionType::send_backward, s, m});
    }
  }
  return lowered;
}

PointToPoint point_to_point(const Action& action, StagePlacement placement, const PipelineShape& shape) {
  // The boundary is the lower stage of the pair; forward data crosses it upward, gradients downward.
  int64_t boundary = 0, peer_stage = 0;
  int direction = 0;
  switch (action.type) {
    case ActionType::send_forward: boundary = action.stage, peer_stage = action.stage + 1; break;
    case ActionType::recv_forward: boundary = action.stage - 1, peer_stage = action.stage - 1; break;
    case ActionType::send_backward: boundary = action.stage - 1, peer_stage = action.stage - 1, direction = 1; break;
    case ActionType::recv_backward: boundary = action.stage, peer_stage = action.stage + 1, direction = 1; break;
    default: throw Error("'" + action.to_string() + "' is a compute action, not a send or recv");
  }
  const int64_t tag = (action.microbatch * shape.stages + boundary) * 2 + direction;
  if (boundary < 0 || tag > INT32_MAX) {
    throw Error("'" + action.to_string() + "' has no peer stage, or its tag does not fit (" + shape.to_string() + ")");
  }
  return {stage_to_rank(placement, shape, peer_stage), static_cast<int>(tag)};
}

}  // namespace titan
