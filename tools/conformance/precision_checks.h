// The PrecisionPolicy contract on one process: its dtypes are ones the
// trainer supports, and training the fixture under the policy (convert(),
// parameters computed in param_dtype(), gradients in reduce_dtype()) keeps
// every step's loss within the policy's own loss_tolerance() of float32.
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// Reads the declaration's `precision:` section (options, and `variants:`
// [{name, options}] checked the same way, rows ending in `:<name>`) and `model:`.
CheckResults check_precision(const std::string& plugin, const ConfigNode& declaration);

}  // namespace titan::conformance
