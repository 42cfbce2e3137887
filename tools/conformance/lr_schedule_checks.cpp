// Resuming from a checkpoint asks a fresh instance for step k directly, so
// the second instance is asked in reverse order: hidden state shows up.
#include "lr_schedule_checks.h"

#include <cmath>

#include "titan/optimizer.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace titan::conformance {

CheckResults check_lr_schedule(const std::string& plugin, const ConfigNode& declaration) {
  ConfigNode section = declaration.child("lr_schedule");
  int64_t steps = section.get<int64_t>("training_steps", 100, "training.steps the schedule is built for");
  if (steps < 1) section.fail("training_steps", "expected an integer >= 1, got " + std::to_string(steps));
  PluginContext context;
  context.options = section.child("options");
  context.training_steps = steps;
  const std::string name = PluginRegistry::instance().load(plugin).name;
  auto first = PluginRegistry::instance().create_lr_schedule(name, context);
  auto second = PluginRegistry::instance().create_lr_schedule(name, context);

  std::vector<double> factors;
  int bad = 0;
  std::string first_bad;
  for (int64_t step = 1; step <= steps; ++step) {
    double factor = first->factor(step);
    factors.push_back(factor);
    if (!(std::isfinite(factor) && factor >= 0) && bad++ == 0) {
      first_bad = "step " + std::to_string(step) + ": " + std::to_string(factor);
    }
  }
  double worst = 0;
  int64_t worst_step = 0;
  for (int64_t step = steps; step >= 1; --step) {
    double diff = std::abs(second->factor(step) - factors[step - 1]);
    if (std::isnan(diff)) diff = INFINITY;
    if (diff > worst) {
      worst = diff;
      worst_step = step;
    }
  }
  std::string range = "steps 1.." + std::to_string(steps);
  return {
      {"lr_schedule.finite_nonnegative", bad == 0, false, static_cast<double>(bad), 0,
       bad ? "bad factor at " + first_bad : "factor(step) finite and >= 0 over " + range},
      {"lr_schedule.deterministic", worst == 0, false, worst, 0,
       worst == 0 ? "a second instance asked in reverse order agrees over " + range
                  : "a second instance asked in reverse order differs at step " + std::to_string(worst_step)},
  };
}

}  // namespace titan::conformance
