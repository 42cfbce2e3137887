// The `keeping_ac` mutant's checkpoint, linked in place of
// plugins/activation_checkpoint/checkpoint_block.cpp: the block runs as
// without checkpointing, keeping every activation. Training stays exact;
// titan-conformance's parallelizer.activation_memory must fail it.
#include "checkpoint_block.h"

namespace titan::activation_checkpoint {

at::Tensor checkpoint_block(const at::Tensor& hidden, const BlockBody& body, const CheckpointSettings&) {
  return body(hidden);
}

}  // namespace titan::activation_checkpoint
