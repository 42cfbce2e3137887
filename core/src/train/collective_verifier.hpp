// comm.verify_collectives: this rank's collectives up to the end of the
// first step, compared across ranks once, so a rank whose code path differs
// (another op, group or size) fails fast with the first differing entry on
// every rank instead of hanging or corrupting data later.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/comm_observer.hpp"

namespace titan {

class CollectiveVerifier : public CommObserver {
 public:
  void on_enqueue(const CollectiveEvent& event) override;
  void on_complete(const CollectiveEvent& /*event*/, bool /*ok*/) override {}

  // Stops recording and compares with every rank over `world` (a collective:
  // all ranks call it after the same step). Throws Error on a mismatch.
  void verify(Comm& world, int64_t step);

 private:
  std::atomic<bool> recording_{true};
  std::vector<std::string> entries_;  // "group|ranks|op|shapes|dtype|call site", collectives only
};

}  // namespace titan
