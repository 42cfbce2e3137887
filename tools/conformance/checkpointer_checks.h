// The Checkpointer contract on real Gloo ranks: a save loads back bit for
// bit on the same world (tensors in place, values, per-rank state), a
// sharded save on the largest world loads under other world sizes and
// layouts, an async save keeps the values of save time, and a damaged
// checkpoint (flipped bytes, truncated or deleted file) is refused, never
// loaded with wrong values.
#pragma once
#include "check_result.h"
#include "kind_checks.h"

namespace titan::conformance {

// Reads the `checkpointer:` section (options, async_options), then runs
// the save and load workers for the world sizes in `request.ranks`.
CheckResults check_checkpointer(const KindCheckRequest& request);

// Registers the "checkpointer" worker (one rank's save or load).
void register_checkpointer_worker();

}  // namespace titan::conformance
