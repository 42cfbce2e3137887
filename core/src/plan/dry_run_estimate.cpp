// The dry run's step-time estimate: its measured work per device fed to
// the step-time model the layout search uses (step_estimate.hpp).
#include <algorithm>

#include "layout_cost.hpp"
#include "titan/dry_run.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

MeshShape mesh_shape(const std::map<std::string, int64_t>& degrees) {
  MeshShape mesh;
  auto degree = [&](const char* dim) {
    auto found = degrees.find(dim);
    return found == degrees.end() ? int64_t{1} : found->second;
  };
  mesh.pp = degree("pp");
  mesh.dp_replicate = degree("dp_replicate");
  mesh.dp_shard = degree("dp_shard");
  mesh.cp = degree("cp");
  mesh.tp = degree("tp");
  mesh.ep = degree("ep");
  return mesh;
}

}  // namespace

StepEstimate estimate_step(const DryRunReport& report, const DeviceSpec& device) {
  if (report.ranks.empty()) throw Error("estimate_step: the dry run has no ranks");
  const RankPlan& slowest = *std::max_element(report.ranks.begin(), report.ranks.end(),
                                               [](const RankPlan& a, const RankPlan& b) { return a.flops < b.flops; });
  const MeshShape mesh = mesh_shape(report.degrees);
  StepWork work;
  work.flops = slowest.flops;
  work.model_flops = report.model_flops_per_step / static_cast<double>(report.world_size);
  work.tokens = static_cast<double>(report.tokens_per_step);
  work.float32_matmuls = report.float32_matmuls;
  work.overlap_units = std::max<int64_t>(1, report.layers / std::max<int64_t>(1, mesh.pp));
  for (const auto& [key, total] : slowest.traffic()) {
    const auto& [dim, op] = key;
    if (op == "recv" || group_size(mesh, dim) < 2) continue;  // a send's bytes are counted once; one rank moves none
    CollectiveTraffic traffic{dim, op, static_cast<double>(total.bytes), total.calls};
    // The model counts a gather by its gathered output; the record holds the input.
    if (op == "all_gather") traffic.bytes *= static_cast<double>(group_size(mesh, dim));
    work.traffic.push_back(traffic);
  }
  if (!report.pipeline_schedule.empty() && mesh.pp > 1) {
    const double forward = (slowest.flops - slowest.recompute_flops) / 3.0;
    const int64_t backward = 4 + static_cast<int64_t>(2.0 * slowest.recompute_flops / std::max(forward, 1.0) + 0.5);
    std::string why;
    if (auto facts = pipeline_facts(report.pipeline_schedule, mesh.pp, report.pipeline_microbatches, backward,
                                    report.layers, why)) {
      work.bubble_fraction = facts->bubble_fraction;
    }
  }
  return estimate_step(work, mesh, device);
}

}  // namespace titan
