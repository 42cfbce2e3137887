// titan::train (titan/trainer.hpp): a real run, watched by the tests' fault
// hooks (debug.* and TITAN_TEST_SIGNAL), which the trainer sees only as its
// RunObserver.
#include "debug/fault_hooks.hpp"
#include "titan/trainer.hpp"
#include "train/run_seams.hpp"

namespace titan {

TrainResult train(RunSpec& spec, const World& world) {
  RunSeams seams;
  seams.observer = std::make_shared<FaultHooks>(spec.core.debug, world.rank);
  return run_training(spec, world, seams);
}

}  // namespace titan
