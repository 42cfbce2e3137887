// The tensor_parallel plugin's options (TorchTitan's parallelism.* names).
#pragma once
#include <cstdint>

namespace titan::tensor_parallel {

struct TpOptions {
  int64_t degree = -1;             // tensor_parallel_degree; -1: the rest of the world
  bool sequence_parallel = true;   // enable_sequence_parallel
  bool async = false;              // enable_async_tensor_parallel
};

}  // namespace titan::tensor_parallel
