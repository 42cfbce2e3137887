// The OptimizerFactory contract: steps match the declared rule's float64
// reference, state is shaped like its parameter, an optimizer over FSDP's
// row shards gives the rows of the whole run (state included), and a
// parameter without a gradient is left alone.
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// `declaration` is the plugin's `optimizer:` conformance section: rule,
// options (given to the plugin's factory and to the reference), tolerance.
CheckResults check_optimizer(const std::string& plugin, const ConfigNode& declaration);

}  // namespace titan::conformance
