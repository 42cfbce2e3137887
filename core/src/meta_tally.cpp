// The thread's meta tally (titan/meta_tally.hpp).
#include "titan/meta_tally.hpp"

namespace titan::internal {

namespace {
thread_local MetaTally* current = nullptr;
}

MetaTally* current_meta_tally() { return current; }

MetaTallyScope::MetaTallyScope(MetaTally& tally) { current = &tally; }
MetaTallyScope::~MetaTallyScope() { current = nullptr; }

}  // namespace titan::internal
