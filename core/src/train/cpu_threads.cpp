#include "titan/cpu_threads.hpp"

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace titan {

namespace {

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

int threads_per_rank(int local_ranks) { return std::max(1, cores() / std::max(1, local_ranks)); }

int default_threads() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    long value = std::strtol(omp, &end, 10);
    if (end != omp && *end == '\0' && value > 0) return static_cast<int>(value);
  }
  return cores();
}

}  // namespace titan
