// The CommObserver contract: an observer sees every collective of a job, so
// it must be cheap per event, keep its memory bounded however long the job
// runs, and never change what the collectives compute.
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// `scratch` becomes the observer's dump folder.
CheckResults check_comm_observer(const std::string& plugin, const ConfigNode& declaration,
                                 const std::string& scratch);

}  // namespace titan::conformance
