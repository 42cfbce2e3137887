// Runs one conformance worker per rank as a local job under torchrun's
// environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), each rank's
// output kept in its own log file, all of them bounded by one deadline.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace titan::conformance {

struct RankGroupOutcome {
  bool ok = false;
  std::string failure;  // which rank failed and how, with the end of its log
};

// `argv[0]` is the program. Logs go to <log_dir>/rank-<R>.log. On a deadline
// or a failed rank the others are killed (one stuck collective would
// otherwise hold them until their own timeouts).
RankGroupOutcome run_rank_group(const std::vector<std::string>& argv, int world_size, const std::string& log_dir,
                                std::chrono::seconds deadline);

// This executable's path (to start workers of the same build).
std::string self_executable();

}  // namespace titan::conformance
