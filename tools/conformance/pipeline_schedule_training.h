// The PipelineSchedule contract, run: each schedule trains a small llama3
// (6 blocks, dim 64) through the trainer itself (the trainer is what cuts
// stages and runs the executor) on 2 Gloo ranks (the declaration's
// pipeline_schedule.training.ranks) with the `pipeline` plugin naming it,
// and its losses, gradient norms and final parameters equal one process's
// run of the same job.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// One row per schedule in `schedules`: pipeline_schedule.<name>.training@<ranks>.
// Schedules in `not_run` (name -> why: e.g. their lists fail the static
// check, which the trainer would refuse too) are reported as skipped, as are
// schedules that refuse the training shape.
CheckResults check_pipeline_training(const std::string& plugin, const std::string& declaration_path,
                                     const ConfigNode& declaration, const std::vector<std::string>& schedules,
                                     const std::map<std::string, std::string>& not_run, const std::string& scratch);

// Registers the "pipeline_training" worker (one rank of a job).
void register_pipeline_training_worker();

}  // namespace titan::conformance
