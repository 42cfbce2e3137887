// The MetricsSink contract: a sink takes every logged step's metrics (the
// trainer's keys, keys it does not know, a non-finite loss) without
// throwing, and costs the training loop little per step.
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// `scratch` becomes the sink's dump folder (where file sinks write).
CheckResults check_metrics_sink(const std::string& plugin, const ConfigNode& declaration, const std::string& scratch);

}  // namespace titan::conformance
