// Chunk positions per cp rank and the sharding of a sequence dim.
#include "sequence_layout.h"

#include <ATen/ATen.h>

#include "titan/error.hpp"

namespace titan::context_parallel {

int64_t SequenceLayout::chunk_length(int64_t seq) const {
  if (seq % chunks() != 0) {
    throw Error("context_parallel: a sequence of " + std::to_string(seq) + " tokens does not split into " +
                std::to_string(chunks()) + " equal chunks (set training.seq_len to a multiple of " +
                std::to_string(chunks()) + ")");
  }
  return seq / chunks();
}

at::Tensor SequenceLayout::positions(int64_t seq, int64_t rank) const {
  const int64_t chunk = chunk_length(seq);
  if (!head_tail_) return at::arange(rank * chunk, (rank + 1) * chunk, at::kLong);
  const int64_t tail = chunks() - 1 - rank;
  return at::cat({at::arange(rank * chunk, (rank + 1) * chunk, at::kLong),
                  at::arange(tail * chunk, (tail + 1) * chunk, at::kLong)});
}

at::Tensor SequenceLayout::shard(const at::Tensor& tensor, int64_t dim, int64_t rank) const {
  const int64_t chunk = chunk_length(tensor.size(dim));
  at::Tensor head = tensor.narrow(dim, rank * chunk, chunk);
  if (!head_tail_) return head;
  return at::cat({head, tensor.narrow(dim, (chunks() - 1 - rank) * chunk, chunk)}, dim);
}

}  // namespace titan::context_parallel
