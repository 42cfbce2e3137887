// The `fsdp` plugin: options (TorchTitan's names where they exist) and the
// descriptor.
#include "fsdp_parallelizer.h"
#include "titan/plugin.hpp"

namespace {

using titan::fsdp::FsdpOptions;

FsdpOptions read_options(const titan::ConfigNode& node) {
  FsdpOptions options;
  options.dp_shard = node.get<int64_t>("dp_shard", options.dp_shard,
                                       "ranks each parameter is sharded over (-1: the rest of the world)");
  options.dp_replicate = node.get<int64_t>("dp_replicate", options.dp_replicate,
                                           "replicas of the sharded model (HSDP when > 1)");
  // true/false are FSDP2's spellings of always/never.
  std::string reshard =
      node.choice("reshard_after_forward", options.reshard_after_forward, {"default", "always", "never", "true", "false"},
                  "free gathered parameters after each block's forward (default = always, but never when "
                  "pipeline_parallel_degree > 1, as TorchTitan: each microbatch's forward would gather them again; "
                  "never keeps them until backward, trading memory for one all-gather; true/false = always/never)");
  options.reshard_after_forward = reshard == "true" ? "always" : reshard == "false" ? "never" : reshard;
  if (options.dp_shard == 0 || options.dp_shard < -1) node.fail("dp_shard", "expected a degree >= 1 or -1");
  if (options.dp_replicate < 1) node.fail("dp_replicate", "expected a degree >= 1");
  return options;
}

void register_fsdp(titan::PluginRegistrar& registrar) {
  registrar.parallelizer([](const titan::PluginContext& context) {
    return std::make_unique<titan::fsdp::FsdpParallelizer>(read_options(context.options));
  });
}

}  // namespace

#ifndef TITAN_FSDP_PLUGIN_NAME
#define TITAN_FSDP_PLUGIN_NAME "fsdp"  // test mutants are built under other names
#endif

TITAN_PLUGIN(TITAN_FSDP_PLUGIN_NAME, "1.0", titan::kind_parallelizer,
             "fully sharded data parallel (FSDP2 semantics; HSDP with dp_replicate > 1)", register_fsdp)
