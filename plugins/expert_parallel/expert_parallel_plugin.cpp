// The `expert_parallel` plugin: its option (TorchTitan's
// parallelism.expert_parallel_degree) and the descriptor.
#include "ep_parallelizer.h"
#include "titan/plugin.hpp"

namespace {

titan::expert_parallel::EpOptions read_options(const titan::ConfigNode& node) {
  titan::expert_parallel::EpOptions options;
  options.degree = node.degree("expert_parallel_degree", options.degree,
                               "ranks the routed experts are split over, taken from dp_shard x cp (the ranks of an "
                               "ep group hold different experts; FSDP shards each expert over the other "
                               "dp_shard x cp / ep ranks, efsdp)",
                               titan::Degree::at_least_one);
  return options;
}

// titan plan's expert parallelism.
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  if (layout.ep == 1) return "";
  return "  - name: " + name + "\n    expert_parallel_degree: " + std::to_string(layout.ep) + "\n";
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(parallelizer, titan::expert_parallel::ExpertParallelizer, "1.0",
                        "expert parallelism: MoE routed experts split over ep (from dp_shard x cp), tokens by "
                        "all-to-all",
                        plan_entry, read_options)
