// The `context_parallel` plugin's options (TorchTitan's parallelism.* names,
// plus context_parallel_method, which TorchTitan does not have).
#pragma once
#include <cstdint>
#include <string>

namespace titan::context_parallel {

struct CpOptions {
  int64_t degree = 2;                        // context_parallel_degree
  std::string rotate_method = "allgather";   // allgather | alltoall (K/V passed around the ring)
  std::string load_balancer = "headtail";    // headtail | none
  std::string method = "ring";               // ring | ulysses
};

}  // namespace titan::context_parallel
