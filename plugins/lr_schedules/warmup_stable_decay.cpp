// The warmup-stable-decay curve; every branch mirrors TorchTitan's
// lr_scheduler.py (linear_warmup_stable_decay and the phase arithmetic
// around it), including its 0-based step and "+ 1" adjustments.
#include "warmup_stable_decay.h"

#include <algorithm>
#include <cmath>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::lr_schedules {

WarmupStableDecay plan(const ScheduleKnobs& knobs) {
  const int64_t total = knobs.total_steps;
  WarmupStableDecay phases;
  phases.decay_type = knobs.decay_type;
  phases.min_lr_factor = knobs.min_lr_factor;
  phases.warmup_steps = knobs.warmup_steps;
  if (phases.warmup_steps > total) {
    spdlog::warn("lr_scheduler: warmup steps ({}) exceed total steps ({}); adjusting warmup steps to {}",
                 phases.warmup_steps, total, total);
    phases.warmup_steps = total;
  }
  if (knobs.has_decay_ratio) {
    // Python's round(): half to even, which nearbyint does in the default
    // rounding mode (round(10 * 0.25) == 2, not 3).
    phases.decay_steps = static_cast<int64_t>(std::nearbyint(static_cast<double>(total) * knobs.decay_ratio));
    if (phases.warmup_steps + phases.decay_steps > total) {
      spdlog::warn("lr_scheduler: warmup ({}) + decay ({}) steps exceed total steps ({}); adjusting decay steps to {}",
                   phases.warmup_steps, phases.decay_steps, total, total - phases.warmup_steps);
      phases.decay_steps = total - phases.warmup_steps;
    }
  } else {
    phases.decay_steps = total - phases.warmup_steps;
  }
  // A virtual last stable step keeps the LR of the last real step above the minimum.
  phases.stable_steps = total + 1 - phases.warmup_steps - phases.decay_steps;
  return phases;
}

double WarmupStableDecaySchedule::factor(int64_t step) const {
  if (step < 1) throw Error("lr schedule: training steps count from 1, got step " + std::to_string(step));
  const auto& p = phases_;
  const int64_t current_step = step - 1;  // TorchTitan's LambdaLR epoch (0-based)
  const int64_t warmup_stable_steps = p.warmup_steps + p.stable_steps;
  if (current_step < p.warmup_steps) {
    return static_cast<double>(current_step + 1) / static_cast<double>(p.warmup_steps);
  }
  if (current_step < warmup_stable_steps || p.decay_steps == 0) return 1.0;
  double progress = static_cast<double>(current_step + 1 - warmup_stable_steps) / static_cast<double>(p.decay_steps);
  progress = std::min(progress, 1.0);  // past the horizon: stay at the minimum
  double curve = 0;
  switch (p.decay_type) {
    case DecayType::linear:
      curve = 1 - progress;
      break;
    case DecayType::sqrt:
      curve = 1 - std::sqrt(progress);
      break;
    case DecayType::cosine:
      curve = 0.5 * (1.0 + std::cos(M_PI * progress));
      break;
  }
  return p.min_lr_factor + (1 - p.min_lr_factor) * curve;
}

}  // namespace titan::lr_schedules
