// The checkpoint folder: committed steps are <folder>/step-N holding a
// metadata.json; everything else there is in progress or debris.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan::dcp {

std::string step_dir(const std::string& folder, int64_t step);
// Where step N is written before its commit (one name for all ranks).
std::string partial_dir(const std::string& folder, int64_t step);
// Steps with a committed checkpoint, ascending.
std::vector<int64_t> committed_steps(const std::string& folder);
void fsync_path(const std::string& path);
// Atomically publishes `partial` as `final_dir` (replacing an older save of
// the same step) and makes the rename durable.
void commit_rename(const std::string& partial, const std::string& final_dir);
// Removes all but the newest `keep` committed steps (keep 0: none removed)
// and partial folders of steps at or below the newest committed one.
void prune(const std::string& folder, int64_t keep);

}  // namespace titan::dcp
