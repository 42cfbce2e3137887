// The job's collective timeout (comm.train_timeout_seconds) as the comm layer
// applies it, for services that watch collectives from the outside (the
// flight recorder's watchdog) and cannot read the core config themselves.
#pragma once
#include <chrono>

namespace titan {

// Zero until the first process group of the job exists.
std::chrono::milliseconds collective_timeout();

}  // namespace titan
