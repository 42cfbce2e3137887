// TEST-ONLY: the reliability fault matrix stops or kills one rank at a named
// phase of training, read from the environment so that no config key
// carries it:
//
//   TITAN_TEST_SIGNAL=SIGNAL:rank=R:phase=PHASE:step=S
//
// SIGNAL is KILL (the rank dies at once) or STOP (it freezes: its peers must
// time out). PHASE is one of startup, forward, backward, optimizer,
// checkpoint_write, checkpoint_commit; S the training step (for the
// checkpoint phases, the step being saved; ignored for startup). It fires
// once, on the job's first attempt only (TITAN_RESTART_COUNT unset or 0),
// so `titan launch --max-restarts 1` then resumes normally.
#pragma once
#include <cstdint>

namespace titan {

// Raises the configured signal when this rank reaches `phase` at `step`.
// Throws titan::Error naming TITAN_TEST_SIGNAL when it is malformed.
void test_signal_point(const char* phase, int64_t step);

// Whether TITAN_TEST_SIGNAL names `phase` for this process's rank and
// attempt (the trainer installs its forward/backward hooks only then).
bool test_signal_armed(const char* phase);

}  // namespace titan
