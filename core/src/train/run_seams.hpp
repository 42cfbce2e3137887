// What a TrainingRun takes from whoever starts it instead of deciding it
// itself: `titan plan`'s dry run and the tests' fault injection enter here,
// so that the trainer holds no branch on either and no global state.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>

#include "titan/dist_runtime.hpp"
#include "titan/model.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"
#include "titan/training_step.hpp"
#include "titan/world.hpp"

namespace titan {

// Watches a run and may step into it (the debug.* hooks and the fault
// matrix's signals, core/src/debug/fault_hooks.hpp); also the step's
// observer.
class RunObserver : public StepObserver {
 public:
  // Before the job's processes meet (the process group's rendezvous).
  virtual void before_rendezvous() {}
  // The model that runs first (a pipeline's first stage), once built.
  virtual void attach(CausalLM& /*first_stage*/) {}
  virtual void begin_step(int64_t /*step*/) {}
  // Once a step's metrics and checkpoint are done.
  virtual void after_step() {}
};

struct RunSeams {
  // The run on the meta device, for its shapes only (`titan plan`'s dry
  // run: one thread per simulated rank): no process-wide setting, file,
  // data, checkpoint or metric; parameters are never initialized and no
  // tensor value is read; the model, the parallelism and the step are the
  // real ones.
  bool shapes_only = false;
  // Held while the plugins transform a pipeline stage's model: the dry
  // run's rank threads share one (plugins are not written for threads).
  std::mutex* plugin_mutex = nullptr;
  // Set: the job's process groups come from here, not from a rendezvous
  // (the dry run's simulated job).
  GroupMaker simulated_groups;
  std::shared_ptr<RunObserver> observer;  // null: nothing watches the run
};

// The training loop (trainer.cpp) with these seams; titan::train
// (train_entry.cpp) gives it the fault hooks as its observer.
TrainResult run_training(RunSpec& spec, const World& world, const RunSeams& seams);

}  // namespace titan
