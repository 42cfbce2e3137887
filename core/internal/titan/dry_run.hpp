// `titan plan`'s dry run: a job of any world size run on one machine
// before launch. Every rank is a thread that builds the real mesh, model
// and plugins and runs real training steps on meta tensors (shapes, no
// values, no memory) through simulated process groups, which check that
// the ranks of every group issue the same collectives with matching shapes
// and that every send has its receive. Each rank's report is measured, not
// modelled: the bytes the meta allocator held at the peak of the last step
// and where, the FLOPs of its matmul and attention kernels, and every
// collective it issued (as the flight recorder records them).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "titan/comm_observer.hpp"
#include "titan/config.hpp"
#include "titan/step_estimate.hpp"

namespace titan {

struct RankPlan {
  int rank = 0;
  std::vector<int> stands_for;                 // the ranks that behave as this one (itself included)
  std::map<std::string, int64_t> coordinates;  // along each mesh dim of degree > 1
  int64_t parameter_bytes = 0;                 // held by this rank (its shards)
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t peak_bytes = 0;       // live bytes at the peak of the measured step
  std::string peak_at;          // "step 2 / forward_backward / backward (step 2 / fsdp reduce_scatter layers.0)"
  int64_t checkpoint_bytes = 0;  // its save plan: the pieces it writes (the first copy of each)
  double flops = 0;             // matmul and attention FLOPs of the measured step
  double recompute_flops = 0;   // the part activation checkpointing ran twice
  std::vector<CollectiveEvent> collectives;  // the measured step's, in the order issued
  // The measured step's ops that would make the host wait for a GPU: copies
  // from host memory without non_blocking (ATen synchronizes the stream
  // after one) and ops whose CUDA kernels read values to the host, and where
  // the first few were. Reads of values cannot run on meta tensors at all.
  int64_t host_waits = 0;
  std::vector<std::string> host_wait_sites;

  // Bytes and calls per (mesh dim, op), e.g. {"dp_shard", "all_gather"}.
  struct Traffic {
    int64_t calls = 0, bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, Traffic> traffic() const;
  int64_t activation_bytes() const {  // at the peak, beyond the state
    return peak_bytes - parameter_bytes - gradient_bytes - optimizer_bytes;
  }
};

struct DryRunReport {
  int world_size = 1;
  int64_t measured_step = 0;  // the step whose peak, FLOPs and collectives are reported
  std::string mesh;           // "pp=8, dp_shard=8, tp=8"
  std::string model;          // "llama3 405B"
  int64_t parameters = 0;     // the whole model's
  int64_t tokens_per_step = 0;  // the job's
  double model_flops_per_step = 0;  // the model's own FLOPs for those tokens (6N + attention), no recompute
  double seconds = 0;         // the dry run's own wall time
  // For a step-time estimate (estimate_step below).
  std::map<std::string, int64_t> degrees;  // every mesh dim
  bool float32_matmuls = false;            // no bf16 compute
  std::string pipeline_schedule;           // "" without a pipeline
  int64_t pipeline_microbatches = 0;
  int64_t layers = 0;
  std::vector<RankPlan> ranks;  // the simulated ranks, each standing for its alike ranks
  int simulated_ranks() const { return static_cast<int>(ranks.size()); }
};

struct DryRunOptions {
  int world_size = 1;
  int steps = 2;  // the last one is measured (the optimizer's state exists from step 1 on)
  // Simulate every rank; otherwise ranks that differ only in their
  // data-parallel coordinates (dp_replicate, dp_shard) are simulated once,
  // by the one at coordinate 0 (docs/planning.md has why they behave
  // alike; the run checks the condition and refuses the shortcut, naming
  // the parameter, where it does not hold).
  bool every_rank = false;
  // One rank thread at a time: slower, for plugins that keep process-wide
  // state (a rank of a real job is a process of its own).
  bool serial = false;
};

// Throws titan::Error naming the group, the ranks and their call sites when
// the ranks' collectives do not line up, a send has no receive, or a rank
// fails (its own error).
DryRunReport dry_run(const ConfigNode& config, const DryRunOptions& options);

// The step time of the dry run's slowest rank on `device`, from its
// measured FLOPs and collective bytes (step_estimate.hpp's model and
// assumptions; the pipeline's bubble from the schedule's own action lists).
StepEstimate estimate_step(const DryRunReport& report, const DeviceSpec& device);

}  // namespace titan
