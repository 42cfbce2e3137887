// Trains as a RunPlan says: builds the run once, then each step is data ->
// forward and backward (gradient accumulation or the pipeline schedule) ->
// the loss over the job -> global gradient clipping -> optimizer and LR ->
// metrics -> checkpoint, with the non-finite loss policy and a clean stop on
// SIGINT/SIGTERM (core/src/train/: training_run.cpp, train_step.cpp,
// trainer.cpp).
#pragma once
#include <cstdint>

#include "titan/run_spec.hpp"
#include "titan/world.hpp"

namespace titan {

struct TrainResult {
  int64_t first_step = 0;   // first step run by this process
  int64_t last_step = 0;    // last completed step
  double last_loss = 0;
  bool stopped_by_signal = false;
  // The checkpoint resumed from had already reached training.steps: no step
  // ran (first_step > last_step), and last_loss means nothing.
  bool already_finished = false;
};

// `world`: this process's place in the job (detect_world()); the default
// is a single process.
TrainResult train(RunSpec& spec, const World& world = World{});

}  // namespace titan
