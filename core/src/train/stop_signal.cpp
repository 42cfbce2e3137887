// Signal handlers only set an atomic; everything else happens in the loop.
#include "stop_signal.hpp"

#include <atomic>
#include <csignal>

namespace titan {

namespace {
std::atomic<int> received_signal{0};
struct sigaction previous_int, previous_term;

void on_signal(int number) { received_signal.store(number); }
}  // namespace

StopSignal::StopSignal() {
  received_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
}

StopSignal::~StopSignal() {
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
}

bool StopSignal::requested() const { return received_signal.load() != 0; }
int StopSignal::signal_number() const { return received_signal.load(); }

}  // namespace titan
