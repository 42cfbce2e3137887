// The `fsdp` plugin's options (TorchTitan's names where they exist), read
// and checked in one place for the plugin's factory (fsdp_plugin.cpp) and
// anything else built on FsdpParallelizer.
#include "fsdp_parallelizer.h"
#include "titan/config.hpp"

namespace titan::fsdp {

FsdpOptions read_fsdp_options(const ConfigNode& node) {
  FsdpOptions options;
  options.dp_shard = node.degree("dp_shard", options.dp_shard,
                                 "ranks each parameter is sharded over (-1: the rest of the world)");
  options.dp_replicate = node.degree("dp_replicate", options.dp_replicate,
                                     "replicas of the sharded model (HSDP when > 1)", Degree::at_least_one);
  // true/false are FSDP2's spellings of always/never.
  options.reshard_after_forward = node.choice(
      "reshard_after_forward", options.reshard_after_forward,
      {{"default", ReshardAfterForward::pipeline_aware},
       {"always", ReshardAfterForward::always},
       {"never", ReshardAfterForward::never},
       {"true", ReshardAfterForward::always},
       {"false", ReshardAfterForward::never}},
      "free gathered parameters after each block's forward (default = always, but never when "
      "pipeline_parallel_degree > 1, as TorchTitan: each microbatch's forward would gather them again; "
      "never keeps them until backward, trading memory for one all-gather; true/false = always/never)");
  options.prefetch = node.get<bool>("prefetch", options.prefetch,
                                     "start the next block's all-gather while this block computes (forward and "
                                     "backward), as FSDP2's implicit prefetch; false gathers each block only when it "
                                     "runs (for measuring overlap: titan_bench_slow_link)");
  return options;
}

}  // namespace titan::fsdp
