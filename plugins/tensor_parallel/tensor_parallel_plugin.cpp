// The `tensor_parallel` plugin: options (TorchTitan's parallelism.* names)
// and the descriptor.
#include "titan/plugin.hpp"
#include "tp_parallelizer.h"

namespace {

using titan::tensor_parallel::TpOptions;

TpOptions read_options(const titan::ConfigNode& node) {
  TpOptions options;
  options.degree = node.get<int64_t>("tensor_parallel_degree", options.degree,
                                     "ranks each weight is split over (-1: the rest of the world)");
  options.sequence_parallel = node.get<bool>(
      "enable_sequence_parallel", options.sequence_parallel,
      "norms and the residual stream on a sequence shard (all-gather before colwise, reduce-scatter after rowwise)");
  options.async = node.get<bool>(
      "enable_async_tensor_parallel", options.async,
      "overlap the all-gather / reduce-scatter with chunked matmuls (needs enable_sequence_parallel)");
  if (options.degree == 0 || options.degree < -1) node.fail("tensor_parallel_degree", "expected a degree >= 1 or -1");
  if (options.async && !options.sequence_parallel) {
    node.fail("enable_async_tensor_parallel",
              "async TP overlaps the sequence-parallel collectives; set enable_sequence_parallel: true");
  }
  return options;
}

void register_tensor_parallel(titan::PluginRegistrar& registrar) {
  registrar.parallelizer([](const titan::PluginContext& context) {
    return std::make_unique<titan::tensor_parallel::TpParallelizer>(read_options(context.options));
  });
}

}  // namespace

#ifndef TITAN_TP_PLUGIN_NAME
#define TITAN_TP_PLUGIN_NAME "tensor_parallel"  // test mutants are built under other names
#endif

TITAN_PLUGIN(TITAN_TP_PLUGIN_NAME, "1.0", titan::kind_parallelizer,
             "tensor and sequence parallelism over the tp mesh dim (async TP optional)", register_tensor_parallel)
