// Sets spdlog's default logger: one pattern with the rank, one level.
#include "titan/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "titan/error.hpp"

namespace titan {

std::string default_log_level() {
  const char* env = std::getenv("TITAN_LOG_LEVEL");
  return env && *env ? env : "info";
}

void init_logging(int rank, const std::string& level) {
  std::string name = level.empty() ? default_log_level() : level;
  auto parsed = spdlog::level::from_str(name);
  if (parsed == spdlog::level::off && name != "off") {
    throw Error("log level '" + name + "' is not one of trace, debug, info, warn, error, critical, off");
  }
  auto logger = spdlog::stderr_color_mt("titan");
  spdlog::drop("titan");
  logger->set_pattern("[%H:%M:%S.%e] [rank" + std::to_string(rank) + "] [%^%l%$] %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
}

}  // namespace titan
