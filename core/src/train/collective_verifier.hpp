// comm.verify_collectives: this rank's collectives up to the end of the
// first step (and with comm.verify_collectives_interval N, each N-th step's
// since the last check), compared across the members of each group, so a
// rank whose code path differs (another op, group or size; a collective
// skipped where the data made it so) fails with the first differing entry
// instead of hanging or corrupting data later.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/comm_observer.hpp"

namespace titan {

class DeviceMesh;

class CollectiveVerifier : public CommObserver {
 public:
  // `interval`: 0 checks the first step only; N also every N-th step.
  explicit CollectiveVerifier(int64_t interval = 0) : interval_(interval) {}
  void on_enqueue(const CollectiveEvent& event) override;
  void on_complete(const CollectiveEvent& /*event*/, bool /*ok*/) override {}

  // Whether `step` ends with a check (`first`: the run's first step).
  bool due(int64_t step, bool first) const { return first || (interval_ > 0 && step % interval_ == 0); }
  // Compares this window's collectives with every member of each of this
  // rank's groups, then starts a new window (or stops recording when no
  // interval is set). A collective over the world: every rank calls it
  // after the same step. Throws Error on a mismatch.
  void verify(const DeviceMesh& mesh, int64_t step);

 private:
  int64_t interval_ = 0;
  int64_t window_start_ = 1;  // the first step of the window being recorded
  std::atomic<bool> recording_{true};
  std::mutex mutex_;                  // on_enqueue may come from another thread (a pipeline's)
  std::vector<std::string> entries_;  // "group|ranks|op|shapes|dtype|call site", collectives only
};

}  // namespace titan
