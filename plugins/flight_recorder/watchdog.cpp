// A self-pipe wakes the thread: the only thing a signal handler may do is
// write(2) to it.
#include "watchdog.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dump_writer.h"
#include "fatal_handlers.h"
#include "recorder.h"
#include "titan/logging.hpp"

namespace titan::flight_recorder {

namespace {
constexpr unsigned char kStop = 0;
}

Watchdog::Watchdog(Recorder& recorder) : recorder_(recorder) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("flight_recorder: pipe() failed: ") + std::strerror(errno));
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  unsigned char stop = kStop;
  if (write(wake_write_, &stop, 1) != 1) {
    // Cannot happen with an open pipe; the join below would then hang, so leave the thread.
    thread_.detach();
  } else {
    thread_.join();
  }
  close(wake_read_);
  close(wake_write_);
}

void Watchdog::wake_for_signal(int signal_number) {
  unsigned char byte = static_cast<unsigned char>(signal_number);
  ssize_t written = write(wake_write_, &byte, 1);
  (void)written;  // nothing safe to do about it inside a handler
}

void Watchdog::run() {
  while (true) {
    // Poll often enough to act within ~10% of a short limit.
    double limit = recorder_.watchdog_timeout_s();
    int interval_ms = limit > 0 ? static_cast<int>(std::clamp(limit * 100.0, 50.0, 1000.0)) : 1000;
    pollfd wake{wake_read_, POLLIN, 0};
    if (poll(&wake, 1, interval_ms) > 0 && (wake.revents & POLLIN)) {
      unsigned char byte = kStop;
      if (read(wake_read_, &byte, 1) == 1) {
        if (byte == kStop) return;
        handle_signal(byte);
      }
    }
    fatal_handlers::keep_installed();
    check_outstanding();
  }
}

void Watchdog::handle_signal(int signal_number) {
  std::string name = strsignal(signal_number) ? strsignal(signal_number) : "signal";
  std::string what = "received signal " + std::to_string(signal_number) + " (" + name + ")";
  if (signal_number == SIGUSR1) {
    recorder_.dump("on_demand", what);
  } else {
    recorder_.dump("signal", what, std::chrono::milliseconds(3000));
    recorder_.log_crash_report("rank " + std::to_string(recorder_.rank()) + " " + what);
  }
  handled_.fetch_add(1);
}

void Watchdog::check_outstanding() {
  const double limit = recorder_.watchdog_timeout_s();
  if (limit <= 0) return;
  const double now = monotonic_seconds();
  Record oldest;
  if (recorder_.buffer().oldest_outstanding(oldest) && now - oldest.event.time_s > limit) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", limit);
    exit_stuck(describe(oldest, now) + ", longer than the watchdog limit of " + seconds + " s");
  }
  // A failed collective ends the run; a teardown stuck on the dead peer must not hang it.
  const double failed = recorder_.first_failure_s();
  if (failed > 0 && now - failed > limit) {
    exit_stuck("the process is still running " + std::to_string(static_cast<int>(now - failed)) +
               " s after a failed collective (stuck in teardown)");
  }
}

void Watchdog::exit_stuck(const std::string& what) {
  spdlog::error("flight_recorder: watchdog: rank {} is stuck: {}", recorder_.rank(), what);
  recorder_.dump("watchdog", "stuck: " + what, std::chrono::milliseconds(3000));
  recorder_.log_crash_report("watchdog on rank " + std::to_string(recorder_.rank()));
  spdlog::error("flight_recorder: watchdog: exiting with status {} instead of hanging", kWatchdogExitCode);
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  std::_Exit(kWatchdogExitCode);
}

}  // namespace titan::flight_recorder
