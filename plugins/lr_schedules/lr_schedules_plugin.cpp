// The `lr_schedules` plugin: reads the `lr_scheduler:` section with
// TorchTitan's knob names and defaults, validates it, and builds the
// warmup-stable-decay schedule over training.steps.
#include <cmath>
#include <sstream>

#include "titan/error.hpp"
#include "titan/plugin.hpp"
#include "warmup_stable_decay.h"

namespace {

using namespace titan::lr_schedules;

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads every option first (unknown keys, `inspect`), then validates.
ScheduleKnobs read_knobs(const titan::PluginContext& context) {
  const titan::ConfigNode& node = context.options;
  ScheduleKnobs knobs;
  knobs.warmup_steps = node.get<int64_t>("warmup_steps", 200, "steps of linear warmup from lr/warmup_steps to lr");
  // has() is false for an explicit `null` too: both mean TorchTitan's None.
  knobs.has_decay_ratio = node.has("decay_ratio");
  knobs.decay_ratio = node.get<double>(
      "decay_ratio", 1.0,
      "fraction of the total steps spent decaying at the end (warmup-stable-decay); "
      "absent, null or 1: decay over every step after warmup");
  std::string decay_type = node.choice("decay_type", "linear", {"linear", "sqrt", "cosine"},
                                       "shape of the decay from 1 to min_lr_factor");
  knobs.min_lr_factor = node.get<double>("min_lr_factor", 0.0, "the decay ends at lr * min_lr_factor");
  int64_t total_steps = node.get<int64_t>(
      "total_steps", 0, "horizon of the schedule; 0: training.steps (set it to keep a long run's curve in a short run)");

  if (knobs.warmup_steps < 0) {
    node.fail("warmup_steps", "expected an integer >= 0, got " + std::to_string(knobs.warmup_steps));
  }
  if (!(knobs.decay_ratio >= 0 && knobs.decay_ratio <= 1)) {
    node.fail("decay_ratio", "expected a number in [0, 1] or null, got " + number_text(knobs.decay_ratio));
  }
  if (!(knobs.min_lr_factor >= 0 && knobs.min_lr_factor <= 1)) {
    node.fail("min_lr_factor", "expected a number in [0, 1], got " + number_text(knobs.min_lr_factor));
  }
  if (total_steps < 0) node.fail("total_steps", "expected an integer >= 0, got " + std::to_string(total_steps));
  // decay_ratio 1 leads to the same phases as None, without TorchTitan's
  // clamp warning (the resolved config writes the default back as 1).
  if (knobs.decay_ratio == 1.0) knobs.has_decay_ratio = false;
  knobs.decay_type = decay_type == "sqrt" ? DecayType::sqrt : decay_type == "cosine" ? DecayType::cosine
                                                                                      : DecayType::linear;
  knobs.total_steps = total_steps > 0 ? total_steps : context.training_steps;
  if (knobs.total_steps <= 0) {
    throw titan::Error("lr_schedules: the schedule has no horizon: training.steps reached the plugin as " +
                       std::to_string(context.training_steps) + " and lr_scheduler.total_steps is not set");
  }
  return knobs;
}

void register_lr_schedules(titan::PluginRegistrar& registrar) {
  registrar.lr_schedule([](const titan::PluginContext& context) {
    return std::make_unique<WarmupStableDecaySchedule>(plan(read_knobs(context)));
  });
}

}  // namespace

TITAN_PLUGIN("lr_schedules", "1.0", titan::kind_lr_schedule,
             "TorchTitan's linear warmup, stable, then linear/sqrt/cosine decay to min_lr_factor",
             register_lr_schedules)
