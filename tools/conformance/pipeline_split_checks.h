// The PipelineSplitter contract (a Parallelizer of ApplyOrder::pipeline_split,
// whose parallelize() the trainer never calls): for each stage count asked,
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
#include "titan/pipeline.hpp"

namespace titan::conformance {

// `make` creates a fresh instance of the plugin under test; `stage_counts`
// are the default_stages values asked for (the harness's --ranks: one stage
// per rank); `variant` is "" or a `variants:` entry's name for the rows.
CheckResults check_pipeline_split(const std::function<std::unique_ptr<Parallelizer>()>& make, const ModelSpec& spec,
                                  const std::vector<int>& stage_counts, const std::string& variant);

}  // namespace titan::conformance
