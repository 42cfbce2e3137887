// The dry run's FLOP count: every matmul and attention kernel LibTorch runs
// on the thread of a dry-run rank, from its input shapes (2 FLOPs per
// multiply-add), as PyTorch's FlopCounterMode counts them. Ranges opened by
// ProfileRange (forward, backward, pipeline actions) are kept as the
// rank's current place, for where its memory peaks.
#include <ATen/record_function.h>

#include <mutex>
#include <set>

#include "dry_rank.hpp"
#include "titan/profile_range.hpp"

namespace titan {

namespace {

std::vector<int64_t> sizes_of(const c10::IValue& value) {
  return value.isTensor() ? value.toTensor().sizes().vec() : std::vector<int64_t>{};
}

double product(const std::vector<int64_t>& sizes, size_t from, size_t to) {
  double result = 1;
  for (size_t i = from; i < to && i < sizes.size(); ++i) result *= static_cast<double>(sizes[i]);
  return result;
}

// [.., m, k] x [.., k, n]: 2 m k n per batch.
double matmul_flops(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() < 2 || b.size() < 2) return 0;
  return 2.0 * product(a, 0, a.size()) * static_cast<double>(b.back());
}

// q [b, h, s_q, d], k [b, h_kv, s_k, d]: QK^T and PV, 2 s_q s_k d each per
// head; the backward runs four such products.
double attention_flops(const std::vector<int64_t>& q, const std::vector<int64_t>& k, bool backward) {
  if (q.size() != 4 || k.size() != 4) return 0;
  const double forward = 4.0 * q[0] * q[1] * q[2] * static_cast<double>(k[2]) * q[3];
  return backward ? 2.0 * forward : forward;
}

double flops_of(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  enum class Kind { none, matmul, matmul_with_bias, attention };
  Kind kind = Kind::none;
  if (name == "aten::mm" || name == "aten::bmm" || name == "aten::_scaled_mm") kind = Kind::matmul;
  if (name == "aten::addmm" || name == "aten::baddbmm") kind = Kind::matmul_with_bias;
  // The fused attention kernels (the math fallback is counted as its bmm's).
  static const std::set<std::string_view> attention = {
      "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
      "aten::_scaled_dot_product_flash_attention",         "aten::_scaled_dot_product_flash_attention_backward",
      "aten::_scaled_dot_product_efficient_attention",     "aten::_scaled_dot_product_efficient_attention_backward",
      "aten::_scaled_dot_product_cudnn_attention",         "aten::_scaled_dot_product_cudnn_attention_backward"};
  if (attention.count(name)) kind = Kind::attention;
  if (kind == Kind::none) return 0;  // inputs() is only valid for the ops asked about
  auto inputs = fn.inputs();
  auto input = [&](size_t i) { return i < inputs.size() ? sizes_of(inputs[i]) : std::vector<int64_t>{}; };
  switch (kind) {
    case Kind::matmul: return matmul_flops(input(0), input(1));
    case Kind::matmul_with_bias: return matmul_flops(input(1), input(2));
    case Kind::attention: {
      // The backward kernels take the output gradient first.
      const bool backward = name.find("backward") != std::string_view::npos;
      return backward ? attention_flops(input(1), input(2), true) : attention_flops(input(0), input(1), false);
    }
    case Kind::none: break;
  }
  return 0;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  DryRank* rank = current_dry_rank();
  if (!rank) return nullptr;
  DryRankTally& tally = rank->tally;
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    tally.ranges.emplace_back(fn.name());
    if (tally.ranges.back() == kRecomputeRange) ++tally.recomputing;
    return nullptr;
  }
  const double flops = flops_of(fn);
  tally.flops += flops;
  if (tally.recomputing > 0) tally.recompute_flops += flops;
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
  DryRank* rank = current_dry_rank();
  if (!rank || fn.scope() != at::RecordScope::USER_SCOPE) return;
  DryRankTally& tally = rank->tally;
  if (tally.ranges.empty()) return;
  if (tally.ranges.back() == kRecomputeRange) --tally.recomputing;
  tally.ranges.pop_back();
}

}  // namespace

void install_flop_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                              .needsInputs(true)
                              .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  });
}

}  // namespace titan
