// The `lr_schedules` plugin: reads the `lr_scheduler:` section with
// TorchTitan's knob names and defaults, validates it, and builds the
// warmup-stable-decay schedule over training.steps.
#include "titan/error.hpp"
#include "titan/plugin.hpp"
#include "warmup_stable_decay.h"

namespace {

using namespace titan::lr_schedules;

// Reads and checks the knobs, then plans the phases over the horizon.
WarmupStableDecay read_phases(const titan::PluginContext& context) {
  using titan::NumberRange;
  const titan::ConfigNode& node = context.options;
  ScheduleKnobs knobs;
  knobs.warmup_steps = node.get<int64_t>("warmup_steps", 200, "steps of linear warmup from lr/warmup_steps to lr");
  if (knobs.warmup_steps < 0) {
    node.fail("warmup_steps", "expected an integer >= 0, got " + std::to_string(knobs.warmup_steps));
  }
  // has() is false for an explicit `null` too: both mean TorchTitan's None.
  knobs.has_decay_ratio = node.has("decay_ratio");
  knobs.decay_ratio = node.number(
      "decay_ratio", 1.0, NumberRange::closed(0, 1),
      "fraction of the total steps spent decaying at the end (warmup-stable-decay); "
      "absent, null or 1: decay over every step after warmup");
  knobs.decay_type = node.choice(
      "decay_type", DecayType::linear,
      {{"linear", DecayType::linear}, {"sqrt", DecayType::sqrt}, {"cosine", DecayType::cosine}},
      "shape of the decay from 1 to min_lr_factor");
  knobs.min_lr_factor =
      node.number("min_lr_factor", 0.0, NumberRange::closed(0, 1), "the decay ends at lr * min_lr_factor");
  int64_t total_steps = node.get<int64_t>(
      "total_steps", 0, "horizon of the schedule; 0: training.steps (set it to keep a long run's curve in a short run)");
  if (total_steps < 0) node.fail("total_steps", "expected an integer >= 0, got " + std::to_string(total_steps));
  // decay_ratio 1 leads to the same phases as None, without TorchTitan's
  // clamp warning (the resolved config writes the default back as 1).
  if (knobs.decay_ratio == 1.0) knobs.has_decay_ratio = false;
  knobs.total_steps = total_steps > 0 ? total_steps : context.training_steps;
  if (knobs.total_steps <= 0) {
    throw titan::Error("lr_schedules: the schedule has no horizon: training.steps reached the plugin as " +
                       std::to_string(context.training_steps) + " and lr_scheduler.total_steps is not set");
  }
  return plan(knobs);
}

}  // namespace

TITAN_PLUGIN_OF(lr_schedule, WarmupStableDecaySchedule, "1.0",
                "TorchTitan's linear warmup, stable, then linear/sqrt/cosine decay to min_lr_factor", read_phases)
