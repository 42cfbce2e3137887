// The MicrobatchRunner contract on one process: step() over N microbatches gives
// the loss and gradients of one forward/backward over the whole batch (the
// mean loss), returns that loss detached, and lets only the last
// microbatch synchronize gradients (set_gradient_sync).
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// Reads the declaration's `microbatch_runner:` section (options, microbatches,
// tolerance) and `model:` (the fixture it trains).
CheckResults check_microbatch_runner(const std::string& plugin, const ConfigNode& declaration);

}  // namespace titan::conformance
