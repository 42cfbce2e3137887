// TEST-ONLY fault hooks of a training run, in one place: the fault matrix's
// signals (TITAN_TEST_SIGNAL, titan/test_signal.hpp) at startup, forward,
// backward and optimizer, and the debug.* hooks (a non-finite loss at a
// step, a rank that kills itself after a step, a forward that runs out of
// memory). The run sees them only as its RunObserver (train/run_seams.hpp),
// given by train(); a run without them set pays one branch per call.
#pragma once
#include <cstdint>
#include <memory>

#include "titan/job_config.hpp"
#include "titan/model.hpp"
#include "train/run_seams.hpp"

namespace titan {

class FaultHooks : public RunObserver {
 public:
  FaultHooks(const DebugConfig& debug, int rank);

  void before_rendezvous() override;
  // Adds the forward and backward signal points and the out-of-memory
  // forward to the model that runs first (the outermost forward wrapper and
  // a hook on its output).
  void attach(CausalLM& first_stage) override;
  // So the model's hooks know the step.
  void begin_step(int64_t step) override { *step_ = step; }
  // debug.inject_nonfinite_loss_at_step: the loss the loop sees.
  at::Tensor loss_seen(const at::Tensor& loss) override;
  void before_optimizer() override;
  // debug.crash_rank / crash_at_step: SIGKILL once the step is done.
  void after_step() override;

 private:
  DebugConfig debug_;
  int rank_;
  std::shared_ptr<int64_t> step_ = std::make_shared<int64_t>(0);
};

}  // namespace titan
