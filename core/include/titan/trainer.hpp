// The training loop (DESIGN.md section 4): data -> schedule step -> global
// gradient clipping -> optimizer -> LR -> metrics -> checkpoint, with the
// non-finite loss policy and a clean stop on SIGINT/SIGTERM.
#pragma once
#include <cstdint>

#include "titan/run_plan.hpp"
#include "titan/world.hpp"

namespace titan {

struct TrainResult {
  int64_t first_step = 0;   // first step run by this process
  int64_t last_step = 0;    // last completed step
  double last_loss = 0;
  bool stopped_by_signal = false;
  int64_t skipped_steps = 0;
  // The checkpoint resumed from had already reached training.steps: no step
  // ran (first_step > last_step), and last_loss means nothing.
  bool already_finished = false;
};

// `world`: this process's place in the job (detect_world()); the default
// is a single process.
TrainResult train(RunPlan& plan, const World& world = World{});

}  // namespace titan
