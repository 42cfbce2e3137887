// Full activation checkpointing of one block: its forward keeps only its
// input; its backward runs the block's forward again with autograd on and
// back-propagates through that (reentrant backward, as PyTorch's reentrant
// checkpoint), so parameter gradients accumulate as without checkpointing.
#pragma once
#include <string>

#include "titan/model.hpp"

namespace titan::activation_checkpoint {

struct CheckpointSettings {
  std::string label;                    // "layers.3", for errors
  bool preserve_rng_state = false;      // replay the CPU generator's state in the recompute
  std::string determinism_check = "default";
  bool per_op = false;                  // keep the outputs per_op_sac.h names and replay them
};

at::Tensor checkpoint_block(const at::Tensor& hidden, const BlockBody& body, const CheckpointSettings& settings);

}  // namespace titan::activation_checkpoint
