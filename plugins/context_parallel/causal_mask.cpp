// Ring attention's causal mask, in a file of its own so that a test build
// can link a wrong mask in its place, with every other line of the plugin
// the real one, to check that titan-conformance catches it
// (tests/harness_plugins: local_mask_cp).
#include "ring_attention.h"

#include <ATen/ATen.h>

namespace titan::context_parallel {

PairVisibility pair_visibility(int64_t first_query, int64_t last_query, int64_t first_key, int64_t last_key) {
  if (last_query < first_key) return PairVisibility::none;
  if (first_query >= last_key) return PairVisibility::all;
  return PairVisibility::partial;
}

at::Tensor causally_visible(const at::Tensor& query_positions, const at::Tensor& key_positions) {
  return query_positions.unsqueeze(1) >= key_positions.unsqueeze(0);
}

}  // namespace titan::context_parallel
