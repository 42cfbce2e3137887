// The analytic per-device model behind the layout search: what a layout
// holds at its peak (memory) and what it does in a step (FLOPs, traffic per
// mesh dim, the pipeline's bubble), from the model's sizes. Internal to
// core's plan/ (layout_search.cpp); the numbers it assumes are listed by
// cost_model_assumptions().
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "titan/layout_search.hpp"

namespace titan {

// Bytes as the planner's tables print them ("12.3 GiB").
std::string gib(double bytes);

// What a pipeline schedule's own action lists say of a shape, for a model
// of `layers` blocks split by the pipeline plugin's rule.
struct PipelineFacts {
  int64_t stages_per_rank = 1;
  double bubble_fraction = 0;  // timed with F = 2 ticks, B (= I, W = 0) as backward_ticks
  // Per pp rank: the blocks of its stages, and the most (block, microbatch)
  // activations it holds at once (forwards whose backward has not run).
  std::vector<int64_t> blocks, peak_block_microbatches;
  std::vector<bool> holds_first, holds_last;  // per pp rank: the embedding's / the output head's stage
};
PipelineFacts no_pipeline(int64_t layers);
// The backward's cost in ticks of a forward = 2: 4 plain, more with
// activation checkpointing's recompute.
int64_t backward_ticks(AcMode mode);
// Compiles and times the schedule; nullopt (with `why`) when it refuses the
// shape or the split leaves a stage without blocks.
std::optional<PipelineFacts> pipeline_facts(const std::string& schedule, int64_t pp, int64_t microbatches,
                                            int64_t backward_ticks, int64_t layers, std::string& why);

// The worst pp rank's peak.
MemoryEstimate layout_memory(const ModelShape& model, const Layout& layout, int64_t seq_len,
                             const PipelineFacts& pipeline, const DeviceSpec& device);
// One device's work per step; global_sequences = the job's batch.
StepWork layout_work(const ModelShape& model, const Layout& layout, int64_t seq_len, int64_t global_sequences,
                     const PipelineFacts& pipeline);

std::vector<std::string> cost_model_assumptions();

}  // namespace titan
