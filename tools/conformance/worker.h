// Multi-rank checks run in worker processes: the harness starts itself once
// per rank (`titan-conformance --worker NAME ...` under torchrun's
// environment), each rank writes its rows to a JSON file in the scratch
// folder, and the harness merges them into one row per check.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "check_result.h"
#include "titan/config.hpp"
#include "titan/dist_runtime.hpp"

namespace titan::conformance {

struct WorkerArgs {
  std::string plugin;       // path of the plugin under test
  std::string declaration;  // its conformance declaration file
  std::string scratch;      // a folder every rank of this run shares
  std::map<std::string, std::string> values;  // --set key=value, worker-specific
  const std::string& value(const std::string& key) const;
};

using WorkerFn = std::function<CheckResults(const WorkerArgs& args)>;

// A worker's bound on rendezvous and on every collective: well inside the
// harness's deadline for the group, so a stuck rank fails as an error.
inline DistTimeouts worker_timeouts() { return {std::chrono::seconds(60), std::chrono::seconds(60)}; }

// Worker bodies register by name (e.g. "parallelizer"); main dispatches.
void register_worker(const std::string& name, WorkerFn fn);
// Runs the named worker in this process (a rank); writes
// <scratch>/results-rank-<RANK>.json. Returns the process exit status.
int run_worker_main(const std::string& name, const WorkerArgs& args);

struct WorkerRun {
  std::string worker;
  WorkerArgs args;
  int ranks = 1;
  std::chrono::seconds deadline{300};
  std::string row_on_failure;  // the row reported when the workers themselves fail
};

// Starts the ranks and merges their rows: a check fails if any rank failed
// it, measures the largest value any rank saw, and reports the first
// failing rank's detail. Workers that crash or hang give one failed row.
CheckResults run_workers(const WorkerRun& run);

void write_results(const std::string& path, const CheckResults& results);
CheckResults read_results(const std::string& path);

}  // namespace titan::conformance
