// Signal handlers do only async-signal-safe work (write, backtrace_symbols_fd,
// nanosleep) and leave the dump to the watchdog thread, waiting a bounded
// time for it; std::terminate runs in normal context and dumps itself.
#include "fatal_handlers.h"

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <csignal>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>

#include "recorder.h"
#include "titan/logging.hpp"
#include "watchdog.h"

namespace titan::flight_recorder::fatal_handlers {

namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};

std::atomic<Recorder*> active{nullptr};
std::atomic<bool> signals_wanted{false};
std::atomic<bool> crash_reported{false};  // terminate already wrote the report; SIGABRT follows
std::terminate_handler previous_terminate = nullptr;

// The handler each of ours replaced, double-buffered: the watchdog writes
// the idle slot, then flips, so a handler never reads a half-written one.
struct sigaction previous[NSIG][2];
std::atomic<int> previous_slot[NSIG];

bool synchronous_fault(int number) {
  return number == SIGABRT || number == SIGSEGV || number == SIGBUS || number == SIGFPE || number == SIGILL;
}

void say(const char* text) {
  ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
  (void)written;
}

void write_stack() {
  void* frames[64];
  int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
}

// Waits (signal-safely) up to `seconds` for the watchdog to finish a request.
void wait_for_watchdog(Watchdog& watchdog, uint64_t before, int seconds) {
  timespec tick{0, 10 * 1000 * 1000};
  for (int i = 0; i < seconds * 100 && watchdog.signals_handled() <= before; ++i) nanosleep(&tick, nullptr);
}

void chain(int number, siginfo_t* info, void* context) {
  const struct sigaction& old = previous[number][previous_slot[number].load()];
  if (old.sa_flags & SA_SIGINFO) {
    if (old.sa_sigaction) old.sa_sigaction(number, info, context);
    return;
  }
  if (old.sa_handler == SIG_IGN) return;
  if (old.sa_handler != SIG_DFL) {
    old.sa_handler(number);
    return;
  }
  if (number == SIGUSR1) return;  // its default would kill the process; we asked for it ourselves
  signal(number, SIG_DFL);  // default action, with the same signal status for the parent
  raise(number);
}

void on_signal(int number, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const bool fault = synchronous_fault(number);
  Recorder* recorder = active.load();
  const struct sigaction& old = previous[number][previous_slot[number].load()];
  const bool dies_now = fault || (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL && number != SIGUSR1);
  if (fault && !crash_reported.exchange(true)) {
    say("flight_recorder: fatal signal ");
    say(strsignal(number));
    say("; stack of the thread that received it:\n");
    write_stack();
    if (recorder && recorder->watchdog()) {
      uint64_t before = recorder->watchdog()->signals_handled();
      recorder->watchdog()->wake_for_signal(number);
      wait_for_watchdog(*recorder->watchdog(), before, 5);
    }
  } else if (!fault && recorder && recorder->watchdog()) {
    uint64_t before = recorder->watchdog()->signals_handled();
    recorder->watchdog()->wake_for_signal(number);
    // Only a signal about to kill us must wait for the dump.
    if (dies_now) wait_for_watchdog(*recorder->watchdog(), before, 5);
  }
  errno = saved_errno;
  chain(number, info, context);
}

std::string current_exception_text() {
  std::exception_ptr current = std::current_exception();
  if (!current) return "no active exception";
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& error) {
    return std::string("uncaught exception: ") + error.what();
  } catch (...) {
    return "uncaught exception of a non-standard type";
  }
}

void on_terminate() {
  if (!crash_reported.exchange(true)) {
    std::string what = "std::terminate called (" + current_exception_text() + ")";
    say(("flight_recorder: " + what + "; stack of the terminating thread:\n").c_str());
    write_stack();
    Recorder* recorder = active.load();
    if (recorder && recorder->watchdog()) {
      recorder->dump("terminate", what, std::chrono::milliseconds(3000));
      recorder->log_crash_report("rank " + std::to_string(recorder->rank()) + " " + what);
    }
  }
  if (previous_terminate) previous_terminate();
  std::abort();
}

void install_signal(int number) {
  struct sigaction ours {};
  ours.sa_sigaction = on_signal;
  ours.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  int idle = 1 - previous_slot[number].load();
  sigaction(number, &ours, &previous[number][idle]);
  previous_slot[number].store(idle);
}

}  // namespace

void install(Recorder* recorder, bool signals) {
  static std::once_flag once;
  active.store(recorder);
  signals_wanted.store(signals);
  std::call_once(once, [] {
    void* warm[1];
    backtrace(warm, 1);  // loads libgcc now: the first call allocates, which a handler must not
    previous_terminate = std::set_terminate(on_terminate);
  });
  keep_installed();
}

void uninstall(Recorder* recorder) {
  Recorder* expected = recorder;
  active.compare_exchange_strong(expected, nullptr);
}

void keep_installed() {
  static std::mutex installing;  // the watchdog and install() may race; handlers never take it
  std::lock_guard<std::mutex> lock(installing);
  if (std::get_terminate() != on_terminate) previous_terminate = std::set_terminate(on_terminate);
  if (!signals_wanted.load()) return;
  for (int number : kSignals) {
    struct sigaction current {};
    sigaction(number, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_signal) continue;
    install_signal(number);
  }
}

}  // namespace titan::flight_recorder::fatal_handlers
