// The Parallelizer contract, on 1, 2 and 4 real Gloo ranks: training with
// the plugin equals the single-process reference (loss, gradient norm,
// parameters), parameters are sharded as the plugin declares, gradients
// match their parameters, replicas agree, and no rank materializes the
// whole model while it is built, parallelized and initialized. A
// PipelineSplitter, whose parallelize() the trainer never calls, gets the
// split checks instead (pipeline_split_checks.h).
#pragma once
#include <string>
#include <vector>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// Runs the worker group for each rank count; `scratch` is a fresh folder.
CheckResults check_parallelizer(const std::string& plugin, const std::string& declaration_path,
                                const ConfigNode& declaration, const std::vector<int>& ranks,
                                const std::string& scratch);

// Registers the "parallelizer" worker (one rank's part).
void register_parallelizer_worker();

}  // namespace titan::conformance
