// The `local_mask_cp` mutant's causal mask, linked in place of
// plugins/context_parallel/causal_mask.cpp: the mask of local indices,
// blind to where each chunk sits in the whole sequence. One rank holds the
// whole sequence, so titan-conformance must catch it on 2.
#include <ATen/ATen.h>

#include "ring_attention.h"

namespace titan::context_parallel {

// The same blindness for whole blocks: both runs taken to start at 0.
PairVisibility pair_visibility(int64_t first_query, int64_t last_query, int64_t first_key, int64_t last_key) {
  const int64_t last_local_query = last_query - first_query, last_local_key = last_key - first_key;
  if (last_local_query < 0) return PairVisibility::none;
  if (0 >= last_local_key) return PairVisibility::all;
  return PairVisibility::partial;
}

at::Tensor causally_visible(const at::Tensor& query_positions, const at::Tensor& key_positions) {
  return at::arange(query_positions.size(0), at::kLong).unsqueeze(1) >=
         at::arange(key_positions.size(0), at::kLong).unsqueeze(0);
}

}  // namespace titan::context_parallel
