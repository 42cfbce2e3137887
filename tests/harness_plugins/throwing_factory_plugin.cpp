// A plugin whose factory throws when asked for an object.
#include <stdexcept>

#include "titan/metrics_sink.hpp"
#include "test_plugin.hpp"

namespace {
void register_throwing_factory(titan::PluginRegistrar& registrar) {
  registrar.metrics_sink([](const titan::PluginContext&) -> std::unique_ptr<titan::MetricsSink> {
    throw std::runtime_error("the disk is full (simulated)");
  });
}
}  // namespace

TITAN_TEST_PLUGIN(throwing_factory, "1.0", titan::kind_metrics_sink, "factory throws", register_throwing_factory)
