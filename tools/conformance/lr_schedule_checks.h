// The LrSchedule contract: factor(step) is finite and >= 0 at every step of
// the declared run, and a pure function of the step (two instances agree,
// whatever order they are asked in).
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// Reads the declaration's `lr_schedule:` section (options, training_steps).
CheckResults check_lr_schedule(const std::string& plugin, const ConfigNode& declaration);

}  // namespace titan::conformance
