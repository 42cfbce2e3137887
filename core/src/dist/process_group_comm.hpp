// The Comm implementation over one c10d process group.
#pragma once
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"

namespace titan {

std::unique_ptr<Comm> make_process_group_comm(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string name,
                                              std::vector<int> global_ranks, std::chrono::milliseconds timeout);

}  // namespace titan
