// The pipeline-parallel schedule contract: a schedule is, per pp rank, the
// ordered list of actions over (stage, microbatch) that rank runs in one
// step. Schedule plugins produce compute-only lists; core lowers them to
// lists with explicit send/recv and proves them deadlock-free (the
// trainer's pipeline program); the executor runs the lowered lists.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/error.hpp"  // validate() and the helpers throw titan::Error

namespace titan {

// Config keys the checks name in their errors.
constexpr const char* kPipelineDegreeKey = "pipeline_parallel_degree";
constexpr const char* kLayersPerStageKey = "pipeline_parallel_layers_per_stage";
constexpr const char* kMicrobatchesKey = "num_pp_microbatches";  // or local_batch_size / pipeline_parallel_microbatch_size
constexpr const char* kMicrobatchSizeKey = "pipeline_parallel_microbatch_size";
constexpr const char* kScheduleCsvKey = "pipeline_parallel_schedule_csv";

// PyTorch's spellings (torch.distributed.pipelining): F I W B SEND_F RECV_F SEND_B RECV_B.
enum class ActionType : uint8_t {
  forward,          // F: the stage's forward of one microbatch (the last stage also computes the loss)
  backward_input,   // I: gradient w.r.t. the stage's input only (zero-bubble split), sent upstream at once
  backward_weight,  // W: gradient w.r.t. the stage's weights, for an earlier I of the same (stage, microbatch)
  full_backward,    // B: I and W together
  send_forward,     // SEND_F: stage s sends its output for microbatch m to stage s+1's rank
  recv_forward,     // RECV_F: stage s receives its input for microbatch m from stage s-1's rank
  send_backward,    // SEND_B: stage s sends the gradient of its input to stage s-1's rank
  recv_backward,    // RECV_B: stage s receives the gradient of its output from stage s+1's rank
};
const char* action_type_code(ActionType type);  // "F", "SEND_F", ...
bool is_compute(ActionType type);               // F, I, W, B

struct Action {
  ActionType type = ActionType::forward;
  int64_t stage = 0;
  int64_t microbatch = 0;
  std::string to_string() const;  // "0F3", "1SEND_B2": stage, type, microbatch (as PyTorch prints)
  // Reverse of to_string (surrounding spaces ignored); throws titan::Error saying what was expected.
  static Action parse(const std::string& text);
  bool operator==(const Action& other) const {
    return type == other.type && stage == other.stage && microbatch == other.microbatch;
  }
  bool operator!=(const Action& other) const { return !(*this == other); }
};

// Which rank holds which stage. loop: rank r holds r, r+pp, r+2pp, ...;
// v (ZBVZeroBubble, DualPipeV; two stages per rank): rank r holds r and 2pp-1-r.
enum class StagePlacement : uint8_t { loop, v };
const char* placement_name(StagePlacement placement);

struct PipelineShape {
  int64_t ranks = 1;         // pipeline_parallel_degree
  int64_t stages = 1;        // model stages in all (layers / pipeline_parallel_layers_per_stage)
  int64_t microbatches = 1;  // local_batch_size / pipeline_parallel_microbatch_size (or num_pp_microbatches)
  std::string to_string() const;  // "pp 4, 8 stages, 8 microbatches"
};

// Throw titan::Error when the stage or rank is out of range, or the shape does not fit the placement.
int64_t stage_to_rank(StagePlacement placement, const PipelineShape& shape, int64_t stage);
std::vector<int64_t> rank_to_stages(StagePlacement placement, const PipelineShape& shape, int64_t rank);

// [rank][position]: each rank's actions in the order it runs them.
using RankActions = std::vector<std::vector<Action>>;

// What a schedule plugin implements (registered with PluginRegistrar::pipeline_schedule).
// Every rank calls compute_actions itself, so it must be a pure function of the shape.
class PipelineSchedule {
 public:
  virtual ~PipelineSchedule() = default;
  virtual std::string name() const = 0;  // as users spell it: "Interleaved1F1B"
  virtual StagePlacement placement() const = 0;
  // Stages per rank it runs: {1, 1} single-stage, {2, 0} any >= 2 (0: no upper bound), {2, 2} V schedules.
  struct StagesPerRank {
    int64_t min = 1;
    int64_t max = 1;
  };
  virtual StagesPerRank stages_per_rank() const = 0;
  // Schedule-specific limits beyond the stages-per-rank range (which core checks): throw
  // titan::Error naming the config key, its value and what would work.
  virtual void validate(const PipelineShape& shape) const = 0;
  // Per rank, compute actions only (F, I, W, B) in run order.
  virtual RankActions compute_actions(const PipelineShape& shape) const = 0;
};

}  // namespace titan
