// Ring attention: each cp rank's queries attend to every key/value block
// of the sequence that the causal (or block-causal) mask lets them see, one block at a time,
// the partial results merged by the log-sum-exp rule. The blocks come from
// one all-gather (`allgather`) or travel around the ring by point-to-point
// (`alltoall`: a rank holds its own block and the one in flight). The
// backward is written out (flash-attention's block gradients): the K/V
// gradients are reduce-scattered, or travel home around the ring.
#pragma once
#include <memory>

#include "sequence_layout.h"
#include "titan/comm.hpp"
#include "titan/layers.hpp"

namespace titan::context_parallel {

struct RingSetup {
  Comm* comm = nullptr;  // the cp group
  SequenceLayout layout{1, false};
  bool point_to_point = false;  // rotate K/V around the ring instead of all-gathering them
};

// [queries, keys]: true where the causal mask lets a query see a key, by
// their positions in the whole sequence (causal_mask.cpp).
at::Tensor causally_visible(const at::Tensor& query_positions, const at::Tensor& key_positions);

// What a run of consecutive queries sees of a run of consecutive keys, from
// their first and last positions in the whole sequence (host integers: the
// ring decides which blocks to compute without reading the device).
enum class PairVisibility { none, all, partial };
PairVisibility pair_visibility(int64_t first_query, int64_t last_query, int64_t first_key, int64_t last_key);

class RingAttention : public AttentionCore {
 public:
  explicit RingAttention(std::shared_ptr<const RingSetup> setup) : setup_(std::move(setup)) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& documents) override;

 private:
  std::shared_ptr<const RingSetup> setup_;
};

}  // namespace titan::context_parallel
