// The `fsdp` plugin's descriptor: an FsdpParallelizer built from the
// options read_fsdp_options (fsdp_options.cpp) reads and checks.
#include "fsdp_parallelizer.h"
#include "titan/plugin.hpp"

namespace {

// titan plan's data parallelism: every layout shards over dp_shard (HSDP
// when it also replicates).
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  std::string entry = "  - name: " + name + "\n    dp_shard: " + std::to_string(layout.dp_shard) + "\n";
  if (layout.dp_replicate > 1) entry += "    dp_replicate: " + std::to_string(layout.dp_replicate) + "\n";
  return entry;
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(parallelizer, titan::fsdp::FsdpParallelizer, "1.0",
                        "fully sharded data parallel (FSDP2 semantics; HSDP with dp_replicate > 1)", plan_entry,
                        titan::fsdp::read_fsdp_options)
