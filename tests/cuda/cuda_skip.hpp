// The first line of every case in tests/cuda/: without a CUDA device the
// case prints why and stops, and ctest reports output containing
// "TITAN_SKIPPED" as skipped, so a machine without a GPU says what it did
// not run instead of passing it silently.
#pragma once
#include "doctest_torch.hpp"

#include <torch/cuda.h>

// `needs`: what the case needs the GPU for, e.g. "to run the fused kernels".
#define TITAN_REQUIRE_CUDA(needs)                                            \
  do {                                                                       \
    if (!torch::cuda::is_available()) {                                      \
      MESSAGE("TITAN_SKIPPED: no CUDA device (" << (needs) << ")");          \
      return;                                                                \
    }                                                                        \
  } while (false)
