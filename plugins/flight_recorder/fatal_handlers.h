// Process-wide hooks that turn a crash or a stop into a dump: signal
// handlers (SIGTERM, SIGINT, SIGUSR1, SIGABRT, SIGSEGV, SIGBUS, SIGFPE,
// SIGILL) and std::terminate (a Gloo thread dies that way on a size
// mismatch). Each chains to the handler it replaced.
#pragma once

namespace titan::flight_recorder {

class Recorder;

namespace fatal_handlers {

// Makes `recorder` the one the hooks report to; installs the hooks once per
// process (the signal handlers only when `signals`).
void install(Recorder* recorder, bool signals);
void uninstall(Recorder* recorder);
// Puts our handlers back over any installed later (e.g. the trainer's stop
// handler), chaining to them; called by the watchdog thread.
void keep_installed();

}  // namespace fatal_handlers
}  // namespace titan::flight_recorder
