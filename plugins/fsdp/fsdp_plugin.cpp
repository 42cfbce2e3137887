// The `fsdp` plugin's descriptor: an FsdpParallelizer built from the
// options read_fsdp_options (fsdp_options.cpp) reads and checks.
#include "fsdp_parallelizer.h"
#include "titan/plugin.hpp"

TITAN_PLUGIN_OF(parallelizer, titan::fsdp::FsdpParallelizer, "1.0",
                "fully sharded data parallel (FSDP2 semantics; HSDP with dp_replicate > 1)",
                titan::fsdp::read_fsdp_options)
