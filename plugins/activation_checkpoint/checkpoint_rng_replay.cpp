// The replay of a block's random numbers for its recompute, in a file of
// its own so that a test build can link a replay that draws other numbers
// in its place, with every other line of the plugin the real one, to check
// that titan-conformance catches it (tests/harness_plugins: fresh_rng_ac).
#include "checkpoint_rng.h"

namespace titan::activation_checkpoint {

void replay_forward_rng(const at::Tensor& forward_state) { set_cpu_rng_state(forward_state); }

}  // namespace titan::activation_checkpoint
