// Logging: spdlog with the rank on every line. Level from --log-level or
// TITAN_LOG_LEVEL (trace, debug, info, warn, error).
#pragma once
#include <spdlog/spdlog.h>

#include <string>

namespace titan {

void init_logging(int rank, const std::string& level = "");
// The level name requested by the environment, or "info".
std::string default_log_level();

}  // namespace titan
