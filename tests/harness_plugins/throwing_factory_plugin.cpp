// A plugin whose factory throws when asked for an object.
#include <stdexcept>

#include "titan/metrics_sink.hpp"
#include "titan/plugin.hpp"

namespace {
void register_throwing(titan::PluginRegistrar& registrar) {
  registrar.metrics_sink([](const titan::PluginContext&) -> std::unique_ptr<titan::MetricsSink> {
    throw std::runtime_error("the disk is full (simulated)");
  });
}
}  // namespace

TITAN_PLUGIN(TITAN_PLUGIN_NAME, "1.0", titan::kind_metrics_sink, "factory throws", register_throwing)
