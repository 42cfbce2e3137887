// Mean token cross-entropy on logits split along the vocabulary over a
// group (TorchTitan's loss_parallel): each rank's max and sum of exponentials
// are all-reduced, the target logit comes from the rank that owns it. No
// rank ever holds more than its [tokens, vocab / ranks] slice.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan {
class Comm;
}

namespace titan::loss_parallel {

// logits [batch, seq, vocab / ranks] (rank r holds vocabulary rows
// [r * V/ranks, (r + 1) * V/ranks)), labels [batch, seq] of global ids; labels
// of -100 are ignored, as in PyTorch. Every rank returns the same loss.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, Comm& group);

}  // namespace titan::loss_parallel
