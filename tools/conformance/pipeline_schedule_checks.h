// The PipelineSchedule contract: on every shape of the declared grid, each
// schedule the plugin registers either refuses the shape with an error that
// names the config key, or produces lists that pass core's static check (no
// deadlock, matched sends, every forward and backward once), the same lists
// every time it is asked (each rank computes them itself), and accepts at
// least one shape; then each schedule trains a small model on 2 ranks
// through the trainer as one process does (pipeline_schedule_training.h).
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// Reads the declaration's `pipeline_schedule:` section (ranks, microbatches,
// stages_per_rank, training); `scratch` is a fresh folder for the training
// runs' workers.
CheckResults check_pipeline_schedule(const std::string& plugin, const std::string& declaration_path,
                                     const ConfigNode& declaration, const std::string& scratch);

}  // namespace titan::conformance
