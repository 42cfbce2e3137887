#include "metrics_sink_checks.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "titan/metrics_sink.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace titan::conformance {

namespace {

// Keys titan's StepMetrics hands every sink (docs/metrics.md), plus one from
// the future; every 5th step a validation line, which has none of them.
std::map<std::string, double> step_metrics(int64_t step) {
  if (step % 5 == 0) return {{"validation_metrics/loss", 2.5}, {"validation_metrics/tps", 1e4}};
  double loss = step == 7 ? NAN : 10.0 / static_cast<double>(step);  // a skipped non-finite step
  return {{"loss_metrics/global_avg_loss", loss},
          {"loss_metrics/global_max_loss", loss},
          {"grad_norm", 1.5},
          {"lr", 3e-4},
          {"throughput(tps)", 1e4},
          {"mfu(%)", 41.0},
          {"memory/max_reserved(GiB)", 2.0},
          {"time_metrics/elapsed(s)", 0.5 * step},
          {"a_key_added_later", 1.0}};
}

}  // namespace

CheckResults check_metrics_sink(const std::string& plugin, const ConfigNode& declaration, const std::string& scratch) {
  const PluginInfo& info = PluginRegistry::instance().load(plugin);
  ConfigNode section = declaration.child("metrics_sink");
  PluginContext context;
  context.options = section.child("options");
  context.dump_folder = scratch + "/metrics_sink";
  std::filesystem::create_directories(context.dump_folder);
  double limit = section.get<double>("max_write_microseconds", 1000.0, "most one step's write() may cost the loop");
  constexpr int64_t kSteps = 500;
  auto sink = PluginRegistry::instance().create_metrics_sink(info.name, context);
  CheckResult accepts{"metrics_sink.accepts_steps", true, false, 0, 0, ""};
  auto start = std::chrono::steady_clock::now();
  try {
    for (int64_t step = 1; step <= kSteps; ++step) {
      sink->write(step, step_metrics(step));
      if (step % 100 == 0) sink->flush();
    }
    accepts.detail =
        std::to_string(kSteps) + " steps (a NaN loss at step 7, an unknown key, validation lines), flushed every 100";
  } catch (const std::exception& error) {
    accepts.passed = false;
    accepts.measured = 1;
    accepts.detail = std::string("write()/flush() threw: ") + error.what();
  }
  double microseconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e6 / kSteps;
  sink.reset();  // a sink that flushes in its destructor must not throw either
  CheckResult cost{"metrics_sink.write_cost", microseconds <= limit, false, microseconds, limit,
                   "microseconds per step's write() (flushes included)"};
  return {accepts, cost};
}

}  // namespace titan::conformance
