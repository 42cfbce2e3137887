// Where this process sits in a job: read from the torchrun, Slurm or
// `titan launch` environment, so one binary runs unchanged under each.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace titan {

struct World {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent already hosts the TCPStore: every rank is a client.
  bool store_hosted_by_agent = false;
  std::string source = "single process";  // "torchrun", "slurm", ...

  bool distributed() const { return world_size > 1; }
  // 0, 1, ..., world_size - 1: the members of a group of the whole job.
  std::vector<int> all_ranks() const {
    std::vector<int> ranks(static_cast<size_t>(world_size));
    for (int r = 0; r < world_size; ++r) ranks[static_cast<size_t>(r)] = r;
    return ranks;
  }
};

using EnvLookup = std::function<const char*(const char* name)>;

// torchrun / titan launch variables (RANK, WORLD_SIZE, ...) first, then
// Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, first host of
// SLURM_NODELIST); neither: a single process. Inconsistent values are
// errors naming the variable.
World detect_world(const EnvLookup& env = {});

// "node[01-04,07]" -> "node01"; "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace titan
