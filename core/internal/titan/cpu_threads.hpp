// How many CPU threads a process computes with when several share a machine.
#pragma once

namespace titan {

// OMP_NUM_THREADS for each of `local_ranks` processes on this machine: its
// cores divided among them, at least 1 (titan launch and titan-conformance
// set it where the user did not; torchrun sets 1).
int threads_per_rank(int local_ranks);

// training.threads 0: OMP_NUM_THREADS where a launcher (or the user) set it,
// else every core.
int default_threads();

}  // namespace titan
