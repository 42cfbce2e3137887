// The flight recorder: a CommObserver that keeps every collective of this
// rank in a ring buffer and writes it to <dump_folder>/flight_recorder/
// when something goes wrong (the triggers are listed in README.md).
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "record_buffer.h"
#include "titan/comm_observer.hpp"

namespace titan::flight_recorder {

struct Options {
  int64_t buffer_size = 2000;
  double watchdog_timeout_seconds = 0;  // 0: comm.train_timeout_seconds
  int64_t crash_report_entries = 20;
  bool dump_on_exit = false;
  bool handle_signals = true;
};

constexpr int kWatchdogExitCode = 3;

class Watchdog;

class Recorder : public CommObserver {
 public:
  Recorder(Options options, int rank, int world_size, std::string dump_folder);
  ~Recorder() override;

  void on_enqueue(const CollectiveEvent& event) override;
  void on_start(const CollectiveEvent& event) override;
  void on_complete(const CollectiveEvent& event, bool ok) override;

  // Writes this rank's dump; callable from any thread. lock_wait bounds the
  // waits for crash paths. Returns the path, or "" when it failed (logged).
  std::string dump(const std::string& trigger, const std::string& reason,
                   std::chrono::milliseconds lock_wait = std::chrono::milliseconds::max());
  // The last crash_report_entries records, as error lines in the log.
  void log_crash_report(const std::string& headline);

  const RecordBuffer& buffer() const { return buffer_; }
  // The limit on an outstanding collective, in seconds; 0 = not known yet.
  double watchdog_timeout_s() const;
  // Monotonic seconds of the first failed collective; 0 = none.
  double first_failure_s() const { return first_failure_s_.load(); }
  Watchdog* watchdog() { return watchdog_.get(); }
  int rank() const { return rank_; }

 private:
  void start_once();

  Options options_;
  int rank_, world_size_;
  std::string folder_;
  RecordBuffer buffer_;
  std::once_flag started_;
  std::unique_ptr<Watchdog> watchdog_;
  std::timed_mutex dump_mutex_;
  std::atomic<double> first_failure_s_{0};
  std::string first_failure_;  // written once, before first_failure_s_ is published
};

double monotonic_seconds();

}  // namespace titan::flight_recorder
