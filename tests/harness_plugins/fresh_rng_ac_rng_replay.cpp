// The `fresh_rng_ac` mutant's replay, linked in place of
// plugins/activation_checkpoint/checkpoint_rng_replay.cpp: the recompute
// draws from a freshly seeded generator instead of the state the forward
// drew from. On a model with dropout titan-conformance must fail it.
#include <ATen/ATen.h>

#include "checkpoint_rng.h"

namespace titan::activation_checkpoint {

void replay_forward_rng(const at::Tensor& forward_state) {
  at::manual_seed(static_cast<uint64_t>(forward_state.sum().item<int64_t>()) + 1);
}

}  // namespace titan::activation_checkpoint
