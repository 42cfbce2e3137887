// The `context_parallel` plugin: options (TorchTitan's parallelism.* names)
// and the descriptor.
#include "cp_parallelizer.h"
#include "titan/plugin.hpp"

namespace {

using titan::context_parallel::CpOptions;

CpOptions read_options(const titan::ConfigNode& node) {
  CpOptions options;
  options.degree = node.get<int64_t>("context_parallel_degree", options.degree,
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
  if (options.degree == 0 || options.degree < -1) node.fail("context_parallel_degree", "expected a degree >= 1 or -1");
  return options;
}

void register_context_parallel(titan::PluginRegistrar& registrar) {
  registrar.parallelizer([](const titan::PluginContext& context) {
    return std::make_unique<titan::context_parallel::CpParallelizer>(read_options(context.options));
  });
}

}  // namespace

#ifndef TITAN_CP_PLUGIN_NAME
#define TITAN_CP_PLUGIN_NAME "context_parallel"  // test mutants are built under other names
#endif

TITAN_PLUGIN(TITAN_CP_PLUGIN_NAME, "1.0", titan::kind_parallelizer,
             "context parallelism over the cp mesh dim (ring attention with head-tail balancing, or Ulysses)",
             register_context_parallel)
