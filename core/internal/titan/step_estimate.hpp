// A training step's time on a device of the table (device_table.hpp), from
// the work one device does in it: its FLOPs, the bytes it moves over each
// mesh dim, and the pipeline's bubble. The layout search feeds it modelled
// work; the dry run can feed it measured work. Every constant it assumes
// is an EstimateOptions field and is said in StepEstimate::assumptions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/device_table.hpp"

namespace titan {

// Titan's mesh: pp, dp_replicate, dp_shard, cp, tp from outer to inner (a
// tp group is consecutive ranks), and ep regrouping dp_shard x cp x tp as
// efsdp x ep, ep fastest (the expert_parallel plugin's split).
struct MeshShape {
  int64_t pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, ep = 1;
  int64_t world() const { return pp * dp_replicate * dp_shard * cp * tp; }
  int64_t dp() const { return dp_replicate * dp_shard; }
  std::string to_string() const;  // "dp_shard 32 x tp 8"; "1 device"
};

// Ranks in one group of `dim`: a mesh dim, a flattened one (dp, dp_shard_cp,
// dp_cp, dp_shard_cp_tp, world) or ep / efsdp. Throws naming the known dims.
int64_t group_size(const MeshShape& mesh, const std::string& dim);
// Whether every group of `dim` lies inside one node: true when the dims
// inner to and including its outermost one hold at most devices_per_node
// ranks.
bool within_node(const MeshShape& mesh, const std::string& dim, int64_t devices_per_node);

struct CollectiveTraffic {
  std::string dim;  // the group it runs over (see group_size)
  std::string op;   // all_gather, reduce_scatter, all_reduce, all_to_all, send
  double bytes = 0;  // per step, summed over calls: the larger buffer (gathered output, unreduced input, message)
  int64_t calls = 0;
};

// What one device does in one step.
struct StepWork {
  double flops = 0;            // recompute included
  double float8_flops = 0;     // the part of `flops` run as float8 matmuls
  double attention_flops = 0;  // the part in attention scores and values (context parallel's ring hides behind it)
  double model_flops = 0;      // the model's own for this device's share of the tokens, no recompute: MFU's numerator
  double tokens = 0;           // the job's tokens per step
  double hbm_bytes = 0;        // memory traffic outside the matmuls that the step waits for (optimizer, ring merges)
  bool float32_matmuls = false;  // no mixed precision: matmuls at the fp32 peak
  std::vector<CollectiveTraffic> traffic;
  // Data-parallel collectives overlap compute except the first gather and
  // the last reduction of each pass: 1 / overlap_units of them stay exposed.
  int64_t overlap_units = 1;
  double bubble_fraction = 0;  // idle share of a pipelined step on a rank, from the schedule's timeline
};

struct EstimateOptions {
  // Matmuls run at DeviceSpec::matmul_efficiency of the bf16 (fp32) peak.
  double float8_efficiency = 0.28;   // of the fp8 dense peak (1.4x the GPUs' bf16 rate)
  double link_efficiency = 0.80;     // of a link's bandwidth that a collective reaches
  double hbm_efficiency = 0.80;
  double intra_node_latency_s = 10e-6;  // per collective call
  double inter_node_latency_s = 25e-6;
};

struct CommTime {
  std::string dim;
  int64_t ranks = 1;
  bool within_node = true;
  double bytes_on_wire = 0;  // this device's share of the step's traffic
  double seconds = 0;        // before overlap
  std::string overlap;       // "compute" (data parallel), "attention" (cp), "none"
};

struct StepEstimate {
  double compute_s = 0;       // matmuls and the optimizer's memory traffic
  double exposed_comm_s = 0;  // communication the step waits for
  double bubble_s = 0;        // pipeline idle time
  double step_s = 0;
  double tokens_per_s = 0;             // the job's
  double tokens_per_s_per_device = 0;
  double mfu = 0;  // model FLOPs / (step time x the bf16 peak, fp32 for fp32 matmuls), as TorchTitan reports it
  std::vector<CommTime> comm;
  std::vector<std::string> assumptions;  // the same for every estimate with these options and device
};

StepEstimate estimate_step(const StepWork& work, const MeshShape& mesh, const DeviceSpec& device,
                           const EstimateOptions& options = {});

}  // namespace titan
