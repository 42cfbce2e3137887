// A deliberately wrong comm observer: it keeps every event it ever saw, so
// a long job's memory grows without bound; titan-conformance's
// comm_observer.bounded_memory must fail it.
#include <vector>

#include "titan/comm_observer.hpp"
#include "titan/plugin.hpp"

namespace {

class KeepEverything : public titan::CommObserver {
 public:
  void on_enqueue(const titan::CollectiveEvent& event) override { events_.push_back(event); }
  void on_complete(const titan::CollectiveEvent& /*event*/, bool /*ok*/) override {}

 private:
  std::vector<titan::CollectiveEvent> events_;
};

void register_unbounded_observer(titan::PluginRegistrar& registrar) {
  registrar.comm_observer([](const titan::PluginContext&) { return std::make_unique<KeepEverything>(); });
}

}  // namespace

TITAN_PLUGIN("unbounded_observer", "1.0", titan::kind_comm_observer, "test plugin: an observer that never forgets",
             register_unbounded_observer)
