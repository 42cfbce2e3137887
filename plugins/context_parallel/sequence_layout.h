// Which positions of a sequence each cp rank holds. The sequence is cut in
// `chunks()` equal chunks; without balancing rank r holds chunk r, with
// head-tail balancing chunks r and 2·cp−1−r, so every rank has as much
// causal attention work as any other (an early chunk sees few keys, a late
// one many).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace titan::context_parallel {

class SequenceLayout {
 public:
  SequenceLayout(int64_t ranks, bool head_tail) : ranks_(ranks), head_tail_(head_tail) {}
  int64_t ranks() const { return ranks_; }
  int64_t chunks() const { return head_tail_ ? 2 * ranks_ : ranks_; }
  // Ascending global positions [seq / ranks] (int64, CPU) `rank` holds of a
  // sequence of `seq` tokens; seq must be a multiple of chunks().
  at::Tensor positions(int64_t seq, int64_t rank) const;
  // `rank`'s piece of `tensor` along `dim` (its length the whole sequence).
  at::Tensor shard(const at::Tensor& tensor, int64_t dim, int64_t rank) const;

 private:
  int64_t chunk_length(int64_t seq) const;  // throws when seq does not split evenly
  int64_t ranks_;
  bool head_tail_;
};

}  // namespace titan::context_parallel
