// The `context_parallel` plugin: options (TorchTitan's parallelism.* names)
// and the descriptor.
#include "cp_parallelizer.h"
#include "titan/plugin.hpp"

namespace {

using titan::context_parallel::CpOptions;

CpOptions read_options(const titan::ConfigNode& node) {
  CpOptions options;
  options.degree = node.degree("context_parallel_degree", options.degree,
                               "ranks the sequence is split over (-1: the rest of the world)");
  options.rotate_method = node.choice(
      "context_parallel_rotate_method", options.rotate_method, {"allgather", "alltoall"},
      "how K/V blocks reach the other ranks: one all-gather, or passed around the ring by point-to-point "
      "(overlapped with compute; a rank holds two blocks at a time)");
  options.load_balancer = node.choice(
      "context_parallel_load_balancer", options.load_balancer, {"headtail", "none"},
      "headtail: rank r holds chunks r and 2cp-1-r so causal work is even; none: one contiguous piece each");
  options.method = node.choice("context_parallel_method", options.method, {"ring", "ulysses"},
                               "ring attention, or Ulysses (all-to-all sequence <-> heads around attention)");
  return options;
}

// titan plan's context parallelism: K/V passed around the ring, overlapping attention.
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  if (layout.cp == 1) return "";
  return "  - name: " + name + "\n    context_parallel_degree: " + std::to_string(layout.cp) +
         "\n    context_parallel_rotate_method: alltoall   # K/V around the ring, overlapping attention\n";
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(parallelizer, titan::context_parallel::CpParallelizer, "1.0",
                        "context parallelism over the cp mesh dim (ring attention with head-tail balancing, or "
                        "Ulysses)",
                        plan_entry, read_options)
