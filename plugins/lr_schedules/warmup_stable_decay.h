// TorchTitan's linear warmup -> stable -> decay LR curve (the lambda of its
// LambdaLR), as a titan::LrSchedule over 1-based training steps.
#pragma once
#include <cstdint>
#include <string>

#include "titan/optimizer.hpp"

namespace titan::lr_schedules {

enum class DecayType { linear, sqrt, cosine };

// The phase lengths, already resolved from the YAML knobs (see plan()).
struct WarmupStableDecay {
  int64_t warmup_steps = 0;
  int64_t stable_steps = 1;  // includes TorchTitan's virtual step at the end
  int64_t decay_steps = 0;
  DecayType decay_type = DecayType::linear;
  double min_lr_factor = 0.0;
};

struct ScheduleKnobs {
  int64_t total_steps = 0;     // the schedule's horizon (training.steps unless set)
  int64_t warmup_steps = 200;
  bool has_decay_ratio = false;  // absent: decay over every step after warmup
  double decay_ratio = 1.0;
  DecayType decay_type = DecayType::linear;
  double min_lr_factor = 0.0;
};

// TorchTitan's build(): warmup clamped to the horizon, decay_steps =
// round-half-even(total * decay_ratio) clamped to what warmup leaves, and
// one virtual stable step so the last real step's LR is not yet the minimum.
// Clamps are logged as warnings, as TorchTitan does.
WarmupStableDecay plan(const ScheduleKnobs& knobs);

class WarmupStableDecaySchedule : public LrSchedule {
 public:
  explicit WarmupStableDecaySchedule(const WarmupStableDecay& phases) : phases_(phases) {}
  // TorchTitan's linear_warmup_stable_decay(current_step = step - 1). Past
  // the horizon the factor stays at min_lr_factor (TorchTitan's lambda would
  // extrapolate the decay curve there).
  double factor(int64_t step) const override;

 private:
  WarmupStableDecay phases_;
};

}  // namespace titan::lr_schedules
