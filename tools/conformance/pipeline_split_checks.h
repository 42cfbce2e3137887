// The PipelineSplitter contract (kind pipeline_splitter): for each stage count asked,
// stage_modules() on the fixture's model gives that many stages, none empty,
// every top-level module and block in exactly one of them, in model order,
// that core's cut_to_stage can cut (each parameter on exactly one stage),
// and the same split from a second instance (each rank computes its own).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "check_result.h"
#include "titan/config.hpp"
#include "titan/pipeline.hpp"

namespace titan::conformance {

// `declaration`: the plugin's conformance.yaml (`pipeline_splitter:
// options:` and the `model:` fixture); `stage_counts` are the
// default_stages values asked for (the harness's --ranks: one stage per rank).
CheckResults check_pipeline_splitter(const std::string& plugin, const ConfigNode& declaration,
                                     const std::vector<int>& stage_counts);

}  // namespace titan::conformance
