// Metrics that each rank of a group holds a part of (a pipeline stage's MoE
// routers), merged so that the logging rank has them all.
#pragma once
#include <map>
#include <string>

#include "titan/comm.hpp"

namespace titan {

// Every rank of `group` calls it with its own keys and gets the union; a
// key two ranks hold keeps the value of the lower rank. Three all-gathers
// (counts, keys as fixed-width bytes, values).
std::map<std::string, double> merge_metrics_over(Comm& group, const std::map<std::string, double>& mine);

}  // namespace titan
