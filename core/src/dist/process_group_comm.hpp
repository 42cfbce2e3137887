// The Comm implementation over one c10d process group, for the trainer's
// distributed runtime (exported from libtitan_core, not part of the SDK).
#pragma once
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"

namespace titan::internal {

// `peers` describes the other members ("rank 1 on interface eth0 (10.0.0.2)")
// for the messages of failed collectives; empty on one process.
std::unique_ptr<Comm> make_process_group_comm(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string name,
                                              std::vector<int> global_ranks, std::chrono::milliseconds timeout,
                                              std::string peers = "");

}  // namespace titan::internal
