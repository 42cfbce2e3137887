// The `local_mask_cp` mutant's causal mask, linked in place of
// plugins/context_parallel/causal_mask.cpp: the mask of local indices,
// blind to where each chunk sits in the whole sequence. One rank holds the
// whole sequence, so titan-conformance must catch it on 2.
#include <ATen/ATen.h>

#include "ring_attention.h"

namespace titan::context_parallel {

at::Tensor causally_visible(const at::Tensor& query_positions, const at::Tensor& key_positions) {
  return at::arange(query_positions.size(0), at::kLong).unsqueeze(1) >=
         at::arange(key_positions.size(0), at::kLong).unsqueeze(0);
}

}  // namespace titan::context_parallel
