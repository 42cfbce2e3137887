#include "sum_of_squares.hpp"

#include <cstring>

namespace titan {

namespace {

constexpr int kLanes = 8;

template <typename Load>
double lanes_sum(int64_t n, Load load) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = load(i + j);
      lane[j] += v * v;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double v = load(i);
    lane[j] += v * v;
  }
  double total = 0;
  for (int j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  return lanes_sum(n, [x](int64_t i) { return static_cast<double>(x[i]); });
}

double sum_of_squares(const double* x, int64_t n) {
  return lanes_sum(n, [x](int64_t i) { return x[i]; });
}

double sum_of_squares_bf16(const uint16_t* x, int64_t n) {
  return lanes_sum(n, [x](int64_t i) {
    const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return static_cast<double>(value);
  });
}

}  // namespace titan
