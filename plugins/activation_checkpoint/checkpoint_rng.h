// preserve_rng_state: the CPU generator's state, read at a block's forward
// and replayed for its recompute, so that what the block draws (dropout)
// is drawn again the same.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan::activation_checkpoint {

// The CPU generator's state, read, and set under the generator's lock
// (checkpoint_rng.cpp).
at::Tensor cpu_rng_state();
void set_cpu_rng_state(const at::Tensor& state);

// Before a recompute: the CPU generator put back in `forward_state`, the
// state the block's forward drew from (checkpoint_rng_replay.cpp).
void replay_forward_rng(const at::Tensor& forward_state);

}  // namespace titan::activation_checkpoint
