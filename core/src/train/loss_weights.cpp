// A microbatch's share of the step's loss (schedule.hpp).
#include <ATen/ATen.h>

#include <numeric>

#include "titan/error.hpp"
#include "titan/microbatch_runner.hpp"

namespace titan {

double loss_weight(const Microbatch& microbatch, double fallback, int64_t begin, int64_t end) {
  const auto& rows = microbatch.row_weights;
  if (rows.empty()) return end < 0 ? fallback : fallback * static_cast<double>(end - begin) /
                                                    static_cast<double>(microbatch.inputs.size(0));
  if (end < 0) end = static_cast<int64_t>(rows.size());
  if (begin < 0 || begin > end || end > static_cast<int64_t>(rows.size())) {
    throw Error("loss weights: rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a microbatch of " +
                std::to_string(rows.size()));
  }
  return std::accumulate(rows.begin() + begin, rows.begin() + end, 0.0);
}

at::Tensor weighted_loss(const at::Tensor& mean, double weight) {
  if (weight == 0) return at::nan_to_num(mean, 0.0) * 0.0;
  return mean * weight;
}

}  // namespace titan
