// The watchdog thread: notices a collective outstanding longer than the
// limit (and a process that outlives a failed collective by as long), then
// dumps, logs the stuck op and exits non-zero instead of hanging. It also
// writes the dumps that signal handlers ask for, since a handler itself
// may not allocate or take locks.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>

namespace titan::flight_recorder {

class Recorder;

class Watchdog {
 public:
  explicit Watchdog(Recorder& recorder);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Async-signal-safe: ask the thread to handle `signal_number` (dump, report).
  void wake_for_signal(int signal_number);
  // Async-signal-safe: how many signal requests the thread has finished.
  uint64_t signals_handled() const { return handled_.load(); }

 private:
  void run();
  void handle_signal(int signal_number);
  void check_outstanding();
  [[noreturn]] void exit_stuck(const std::string& what);

  Recorder& recorder_;
  int wake_read_ = -1, wake_write_ = -1;
  std::atomic<uint64_t> handled_{0};
  std::thread thread_;
};

}  // namespace titan::flight_recorder
