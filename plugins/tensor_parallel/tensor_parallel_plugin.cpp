// The `tensor_parallel` plugin: options (TorchTitan's parallelism.* names)
// and the descriptor.
#include "titan/plugin.hpp"
#include "tp_parallelizer.h"

namespace {

using titan::tensor_parallel::TpOptions;

TpOptions read_options(const titan::ConfigNode& node) {
  TpOptions options;
  options.degree = node.degree("tensor_parallel_degree", options.degree,
                               "ranks each weight is split over (-1: the rest of the world)");
  options.sequence_parallel = node.get<bool>(
      "enable_sequence_parallel", options.sequence_parallel,
      "norms and the residual stream on a sequence shard (all-gather before colwise, reduce-scatter after rowwise)");
  options.async = node.get<bool>(
      "enable_async_tensor_parallel", options.async,
      "overlap the all-gather / reduce-scatter with chunked matmuls (needs enable_sequence_parallel)");
  if (options.async && !options.sequence_parallel) {
    node.fail("enable_async_tensor_parallel",
              "async TP overlaps the sequence-parallel collectives; set enable_sequence_parallel: true");
  }
  return options;
}

// titan plan's tensor parallelism, with sequence parallelism except under
// a pipeline (Titan does not yet pass sequence shards across stages).
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  if (layout.tp == 1) return "";
  return "  - name: " + name + "\n    tensor_parallel_degree: " + std::to_string(layout.tp) +
         "\n    enable_sequence_parallel: " + (layout.pp == 1 ? "true" : "false") + "\n";
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(parallelizer, titan::tensor_parallel::TpParallelizer, "1.0",
                        "tensor and sequence parallelism over the tp mesh dim (async TP optional)", plan_entry,
                        read_options)
