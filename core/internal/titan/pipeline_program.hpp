// The trainer's services around the pipeline schedule contract
// (titan/pipeline_schedule.hpp):
// lowering compute lists to lists with explicit send/recv, the static check
// that proves the lists of all ranks run together without a deadlock, the
// theoretical timeline and bubble, and user schedules read from CSV.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/pipeline_schedule.hpp"

namespace titan {

// The cost of each compute action in ticks; PyTorch's simulator counts one per action.
// Any unit works: titan_bench_pipeline replays a schedule with measured microseconds.
struct ActionCosts {
  int64_t forward = 1;
  int64_t backward_input = 1;
  int64_t backward_weight = 1;
  int64_t full_backward = 2;  // = I + W
  // A stage's own costs (index: stage) in place of the four above, where the
  // stages differ (the first holds the embedding, the last the head); empty:
  // every stage costs the above. Their own `stages` is not read.
  std::vector<ActionCosts> stages;
};

struct TimedAction {
  Action action;
  int64_t start = 0;  // tick it starts; communication takes no ticks (start == end)
  int64_t end = 0;
};

struct PipelineTimeline {
  std::vector<std::vector<TimedAction>> ranks;  // every action of the full lists, in list order
  int64_t makespan = 0;                         // the tick the last rank finishes
  // Idle compute ticks over all ranks / (ranks x makespan). For GPipe and 1F1B with B = 2F
  // this is (pp-1)/(m+pp-1).
  double bubble_fraction = 0;
};

// Adds SEND_F/SEND_B right after the compute that produces the data and RECV_F/RECV_B right
// before the compute that consumes it, only between stages on different ranks (the V
// placement's middle hand-off and adjacent local stages pass tensors in memory).
RankActions lower_to_comm(const RankActions& compute, StagePlacement placement, const PipelineShape& shape);

// Where a SEND/RECV goes and the tag both ends use (Comm::send_async / recv_async): a send and
// its matching recv get the same tag, unique per (stage boundary, microbatch, direction) in a
// step, so recvs may be posted in any order. Throws titan::Error for a compute action.
struct PointToPoint {
  int64_t peer = 0;  // the other end's pp rank
  int tag = 0;
};
PointToPoint point_to_point(const Action& action, StagePlacement placement, const PipelineShape& shape);

// The static check of full lists (with comm). All ranks run together: a rank advances while its
// next action can run; a recv runs once its matching send was issued; sends never block. Refuses,
// naming the rank, action (position and text), microbatch and what it waits for or breaks:
// a deadlock or a recv whose send never comes, a send without exactly one matching recv, comm
// between stages on one rank, a backward before its forward, W before its I, W or F twice, a
// (stage, microbatch) without exactly one F and one B (or I + W), a stage on the wrong rank, an
// out-of-range stage or microbatch. `label` names the schedule or file in messages.
PipelineTimeline check_pipeline(const RankActions& actions, StagePlacement placement, const PipelineShape& shape,
                                const std::string& label, const ActionCosts& costs = {});

// Everything an executor needs for one step on every rank.
struct PipelineProgram {
  std::string name;  // the schedule's name or the CSV file
  StagePlacement placement = StagePlacement::loop;
  PipelineShape shape;
  RankActions compute;   // compute-only lists
  RankActions actions;   // full lists with comm: what each rank runs
  PipelineTimeline timeline;
};

// Refuses a shape the schedule cannot run (ranks, stages per rank, then the schedule's own
// validate()), naming the config key, its value and what would work. For config check.
void validate_pipeline_shape(const PipelineSchedule& schedule, const PipelineShape& shape);

// validate_pipeline_shape, then builds, lowers and checks the lists. Throws titan::Error naming
// the config key or the rank/action at fault.
PipelineProgram compile_pipeline(const PipelineSchedule& schedule, const PipelineShape& shape);

// A schedule from a CSV file: one row per rank, comma-separated actions in PyTorch's spelling
// ("0F0,0F1,0I0,0W0"), blank cells skipped; compute-only (lowered here) or with comm (checked
// as written). Placement: loop, or v when only v fits the stages each row runs.
struct CsvSchedule {
  std::string path;
  RankActions rows;
  std::vector<std::vector<int64_t>> columns;  // the 1-based CSV column of each action, for messages
  bool has_comm = false;
  StagePlacement placement = StagePlacement::loop;
  PipelineShape shape;  // ranks = rows; stages and microbatches from the largest indices used
};
CsvSchedule read_schedule_csv(const std::string& path);
// `shape`: the run's (placement is chosen again for it); an error names the key whose value
// differs from what the file uses, or the row (rank), column and action at fault.
PipelineProgram compile_pipeline_csv(const CsvSchedule& csv, const PipelineShape& shape);

// PyTorch-style table: one column per rank, one row per list position.
std::string format_pipeline_order(const RankActions& actions);

}  // namespace titan
