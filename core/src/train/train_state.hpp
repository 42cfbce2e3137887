// Collects the whole train state (model, optimizer, RNG, step, data
// position) as the flat TrainState a Checkpointer saves and restores.
#pragma once
#include <ATen/ATen.h>

#include "data/batch_prefetcher.hpp"
#include "titan/checkpointer.hpp"
#include "titan/data.hpp"
#include "titan/model.hpp"
#include "titan/optimizer.hpp"

namespace titan {

class TrainStateView {
 public:
  // `batches`: the data position is that of the steps taken.
  TrainStateView(CausalLM& model, Optimizer& optimizer, BatchPrefetcher& batches);
  // A state whose tensors alias the live ones (RNG: a fresh copy).
  TrainState capture(int64_t step);
  // Restores after Checkpointer::load filled `state`; returns the step.
  int64_t restore(const TrainState& state);
  TrainState& slots() { return slots_; }  // for Checkpointer::load

 private:
  CausalLM& model_;
  Optimizer& optimizer_;
  BatchPrefetcher& batches_;
  TrainState slots_;
};

}  // namespace titan
