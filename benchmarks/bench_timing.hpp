// Timing helpers the benchmarks share: wall seconds since a start, and the
// median of repeated measurements (robust to one noisy run).
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace titan::bench {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace titan::bench
