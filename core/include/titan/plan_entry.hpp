// How a plugin takes part in the configs `titan plan` writes. The planner
// chooses a layout (mesh degrees, pipeline schedule, activation
// checkpointing, float8) and, for each of its roles, asks the plugin the
// build gives that role (TITAN_DEFAULT_PLUGINS: plan.data_parallel=fsdp,
// ...) for that plugin's entry in the config's `plugins:` list. So the
// planner names no plugin and no plugin option: each plugin writes its own.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace titan {

// The layout `titan plan` chose, in the terms its entries are written from.
struct PlannedLayout {
  int64_t dp_replicate = 1, dp_shard = 1, tp = 1, cp = 1, pp = 1, ep = 1;
  std::string pp_schedule;         // TorchTitan's schedule name, when pp > 1
  int64_t pp_microbatch_size = 0;  // sequences a microbatch, when pp > 1
  int64_t pp_microbatches = 0;     // microbatches a step, when pp > 1
  // none | every_2nd (selective, every 2nd block) | op (selective per op) | full
  std::string activation_checkpoint = "none";
  bool float8 = false;
};

// The plugin's lines of the `plugins:` list for a layout, beginning
// "  - name: <name>" (`name` as the plugin was loaded), each line ending in
// a newline; "" when the layout does not use the plugin.
using PlanEntry = std::function<std::string(const PlannedLayout& layout, const std::string& name)>;

// The planner's roles, in the order their entries are written; each is
// TITAN_DEFAULT_PLUGINS' "plan.<role>".
inline constexpr const char* kPlanRoles[] = {"data_parallel", "tensor_parallel", "loss_parallel",
                                             "context_parallel", "pipeline", "expert_parallel",
                                             "activation_checkpoint", "float8"};

}  // namespace titan
