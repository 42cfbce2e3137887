// A deliberately wrong comm observer: it keeps every event it ever saw, so
// a long job's memory grows without bound; titan-conformance's
// comm_observer.bounded_memory must fail it.
#include <vector>

#include "titan/comm_observer.hpp"
#include "test_plugin.hpp"

namespace {

class KeepEverything : public titan::CommObserver {
 public:
  void on_enqueue(const titan::CollectiveEvent& event) override { events_.push_back(event); }
  void on_complete(const titan::CollectiveEvent& /*event*/, bool /*ok*/) override {}

 private:
  std::vector<titan::CollectiveEvent> events_;
};

}  // namespace

TITAN_TEST_PLUGIN_OF(unbounded_observer, comm_observer, KeepEverything, "1.0",
                "test plugin: an observer that never forgets")
