// Trains as a RunSpec says: builds the run once, then each step is data ->
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

// One pass of the validation section over its held-out set, on the model as
// the run would resume it (its newest checkpoint, or
// checkpoint.initial_load_path), through the same parallelisms; no step is
// trained. The loss is the mean next-token cross-entropy over the set's
// tokens, reduced over the job as in training.
struct EvalResult {
  int64_t step = 0;          // the checkpoint's step (0: none was loaded)
  bool loaded = false;       // a checkpoint or initial_load_path gave the weights
  double loss = 0;
  double perplexity = 0;     // exp(loss)
  int64_t batches = 0;
  double tokens_per_sec = 0; // this rank's
};
EvalResult evaluate(RunSpec& spec, const World& world = World{});

}  // namespace titan
