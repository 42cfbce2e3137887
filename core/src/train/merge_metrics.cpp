#include "merge_metrics.hpp"

#include <ATen/ATen.h>

#include <cstring>

#include "titan/error.hpp"

namespace titan {

namespace {
constexpr int64_t kKeyBytes = 192;  // "moe/layers.<N>.moe.router/expert_bias_norm" and longer module paths
}

std::map<std::string, double> merge_metrics_over(Comm& group, const std::map<std::string, double>& mine) {
  const at::Tensor counts = group.all_gather(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong));
  const int64_t most = std::max<int64_t>(1, counts.max().item<int64_t>());
  at::Tensor keys = at::zeros({most, kKeyBytes}, at::kByte);
  at::Tensor values = at::zeros({most}, at::kDouble);
  int64_t row = 0;
  for (const auto& [key, value] : mine) {
    if (static_cast<int64_t>(key.size()) >= kKeyBytes) {
      throw Error("metric key '" + key + "' is longer than " + std::to_string(kKeyBytes - 1) +
                  " bytes; it cannot be merged over group '" + group.name() + "'");
    }
    std::memcpy(keys[row].data_ptr(), key.data(), key.size());
    values[row] = value;
    ++row;
  }
  const at::Tensor all_keys = group.all_gather(keys).contiguous();
  const at::Tensor all_values = group.all_gather(values).contiguous();
  std::map<std::string, double> merged;
  for (int64_t rank = 0; rank < group.size(); ++rank) {
    for (int64_t i = 0; i < counts[rank].item<int64_t>(); ++i) {
      const int64_t at_row = rank * most + i;
      const char* bytes = static_cast<const char*>(all_keys[at_row].data_ptr());
      merged.emplace(std::string(bytes, strnlen(bytes, kKeyBytes)), all_values[at_row].item<double>());
    }
  }
  return merged;
}

}  // namespace titan
