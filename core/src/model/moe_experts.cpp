// The routed experts' SwiGLU on grouped weights: one matmul per expert, or
// LibTorch's grouped GEMM with each expert's rows padded to the alignment
// the CUDA kernel needs, laid out on the host from counts read there or on
// the device from counts left there. All give the same numbers
// (tests/unit/moe_test.cpp).
#include <ATen/ATen.h>

#include <numeric>

#include "titan/error.hpp"
#include "titan/host_to_device.hpp"
#include "titan/moe.hpp"

namespace titan {

namespace {

void check_counts(const at::Tensor& w1, const at::Tensor& tokens, const std::vector<int64_t>& counts) {
  int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (static_cast<int64_t>(counts.size()) != w1.size(0) || rows != tokens.size(0)) {
    throw Error("moe experts: " + std::to_string(counts.size()) + " groups of " + std::to_string(rows) +
                " rows for " + std::to_string(w1.size(0)) + " experts and " + std::to_string(tokens.size(0)) +
                " token rows; the dispatcher's counts must match both");
  }
}

// LibTorch's grouped GEMM (its CPU loop included) takes only operands whose
// rows are whole multiples of 16 bytes.
bool rows_fit_grouped_mm(const at::Tensor& w1, const at::Tensor& tokens) {
  int64_t element = static_cast<int64_t>(tokens.element_size());
  return (w1.size(2) * element) % 16 == 0 && (w1.size(1) * element) % 16 == 0;
}

// What both grouped layouts check before padding: the alignment, and rows
// at::_grouped_mm takes (unless a product seam multiplies instead).
void check_grouped(const at::Tensor& w1, const at::Tensor& tokens, int64_t alignment, bool own_product) {
  if (alignment < 1) throw Error("moe experts: token group alignment must be >= 1, got " + std::to_string(alignment));
  if (!own_product && !rows_fit_grouped_mm(w1, tokens)) {
    throw Error("moe experts: the grouped GEMM needs dim (" + std::to_string(w1.size(2)) + ") and the experts' hidden "
                "size (" + std::to_string(w1.size(1)) + ") to be multiples of " +
                std::to_string(16 / tokens.element_size()) + " for " + std::string(c10::toString(tokens.scalar_type())) +
                " (16-byte rows); change them or use experts_backend: loop");
  }
}

// The experts' SwiGLU over the padded rows, each product through `multiply`.
template <typename Multiply>
at::Tensor grouped_swiglu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                          const Multiply& multiply) {
  at::Tensor h = at::silu(multiply(x, w1)) * multiply(x, w3);
  return multiply(h, w2);
}

}  // namespace

at::Tensor run_experts_loop(const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                            const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert,
                            const ExpertMatmul& matmul) {
  check_counts(w1, tokens, tokens_per_expert);
  // Each expert's weights as one of unbind's views: its backward stacks the
  // experts' gradients once. Indexing (w1[e]) would make each expert's
  // backward a zero-filled gradient of the whole [E, ...] weight to add up:
  // at 64 experts of 256 x 768, 13x the forward + backward (titan_bench_moe).
  const std::vector<at::Tensor> w1s = w1.unbind(0), w2s = w2.unbind(0), w3s = w3.unbind(0);
  auto product = [&](const at::Tensor& x, const at::Tensor& weight) {
    return matmul ? matmul(x, weight) : at::matmul(x, weight.t());
  };
  auto expert = [&](size_t e, const at::Tensor& x) {
    at::Tensor h = at::silu(product(x, w1s[e])) * product(x, w3s[e]);
    return product(h, w2s[e]);
  };
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (size_t e = 0; e < tokens_per_expert.size(); ++e) {
    int64_t count = tokens_per_expert[e];
    if (count == 0) continue;
    outputs.push_back(expert(e, tokens.narrow(0, start, count)));
    start += count;
  }
  // No rows (under expert parallelism: a rank that received none this
  // step): the empty output still comes from the tokens and the weights, so
  // the weights get (zero) gradients and the tokens' backward runs, exactly
  // as on the ranks that did get rows. A detached empty tensor here left the
  // weights without gradients and skipped the all-to-alls' backward.
  if (outputs.empty()) return expert(0, tokens);
  return at::cat(outputs, 0);
}

at::Tensor run_experts_grouped_mm(const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                                  const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert,
                                  int64_t alignment, const ExpertGroupedMatmul& product) {
  check_counts(w1, tokens, tokens_per_expert);
  check_grouped(w1, tokens, alignment, static_cast<bool>(product));
  // Each group padded with rows of a zero token (index `rows`); the real
  // rows' places in the padded layout, to take the output back.
  const int64_t rows = tokens.size(0);
  std::vector<int64_t> gather, keep, offsets, group_rows;
  int64_t start = 0, padded_end = 0;
  for (int64_t count : tokens_per_expert) {
    int64_t padded = (count + alignment - 1) / alignment * alignment;
    for (int64_t i = 0; i < padded; ++i) {
      if (i < count) keep.push_back(padded_end + i);
      gather.push_back(i < count ? start + i : rows);
    }
    start += count;
    padded_end += padded;
    offsets.push_back(padded_end);
    group_rows.push_back(padded);
  }
  const bool padding = padded_end != rows;
  auto on_device = [&](const std::vector<int64_t>& values, at::ScalarType dtype) {
    return host_to_device(at::tensor(values, at::TensorOptions().dtype(at::kLong)), tokens.device(), dtype);
  };
  at::Tensor x = tokens;
  if (padding) {
    x = at::cat({tokens, at::zeros({1, tokens.size(1)}, tokens.options())}, 0).index_select(0, on_device(gather, at::kLong));
  }
  at::Tensor offs = on_device(offsets, at::kInt);
  at::Tensor out = grouped_swiglu(x, w1, w2, w3, [&](const at::Tensor& a, const at::Tensor& weights) {
    return product ? product(a, weights, offs, group_rows) : at::_grouped_mm(a, weights.transpose(-2, -1), offs);
  });
  return padding ? out.index_select(0, on_device(keep, at::kLong)) : out;
}

at::Tensor run_experts_grouped_mm_on_device(const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3,
                                            const at::Tensor& tokens, const at::Tensor& counts, int64_t alignment) {
  check_grouped(w1, tokens, alignment, /*own_product=*/false);
  if (counts.dim() != 1 || counts.size(0) != w1.size(0)) {
    throw Error("moe experts: counts of shape " + c10::str(counts.sizes()) + " for " + std::to_string(w1.size(0)) +
                " experts; the dispatcher's counts must be one per expert");
  }
  const int64_t rows = tokens.size(0), experts = counts.size(0);
  const at::Tensor sizes = counts.to(at::kLong);
  // Each expert's group padded to a multiple of the alignment; where each
  // sorted row lands in that layout: its place in its group after the
  // padded groups before it. The buffer's size is a bound known on the host.
  const at::Tensor padded = (sizes + (alignment - 1)).div(alignment, "floor") * alignment;
  const at::Tensor padded_ends = padded.cumsum(0);
  at::Tensor x = tokens, places;
  if (alignment > 1) {
    const at::Tensor expert_of_row = at::repeat_interleave(at::arange(experts, sizes.options()), sizes, 0, rows);
    const at::Tensor shift = (padded_ends - padded) - (sizes.cumsum(0) - sizes);  // padded start - start
    places = at::arange(rows, sizes.options()) + shift.index_select(0, expert_of_row);
    x = at::zeros({rows + experts * (alignment - 1), tokens.size(1)}, tokens.options()).index_copy(0, places, tokens);
  }
  const at::Tensor offs = padded_ends.to(at::kInt);
  at::Tensor out = grouped_swiglu(x, w1, w2, w3, [&](const at::Tensor& a, const at::Tensor& weights) {
    return at::_grouped_mm(a, weights.transpose(-2, -1), offs);
  });
  return places.defined() ? out.index_select(0, places) : out;
}

RoutedExperts::~RoutedExperts() = default;

bool RoutedExperts::runs_on_device_counts(const at::Tensor& /*tokens*/) const { return false; }

at::Tensor RoutedExperts::forward_on_device_counts(const at::Tensor& /*tokens*/, const at::Tensor& /*counts*/) {
  throw Error("moe experts: these experts take their counts on the host (runs_on_device_counts is false)");
}

GroupedExperts::GroupedExperts(int64_t num_experts, int64_t dim, int64_t hidden_dim, const MoEOptions& options,
                               const at::TensorOptions& tensor_options)
    : backend_(options.backend), alignment_(options.token_group_alignment) {
  w1 = register_parameter("w1", at::empty({num_experts, hidden_dim, dim}, tensor_options));
  w2 = register_parameter("w2", at::empty({num_experts, dim, hidden_dim}, tensor_options));
  w3 = register_parameter("w3", at::empty({num_experts, hidden_dim, dim}, tensor_options));
}

bool GroupedExperts::grouped(const at::Tensor& tokens) const {
  const bool chosen = backend_ == ExpertsBackend::grouped_mm ||
                      (backend_ == ExpertsBackend::automatic && tokens.is_cuda() && rows_fit_grouped_mm(w1, tokens));
  return chosen && !(matmul && !grouped_matmul);
}

int64_t GroupedExperts::alignment(const at::Tensor& tokens) const {
  // 16 rows: the CUTLASS kernel's alignment (TorchTitan's TOKEN_GROUP_ALIGN_SIZE_M).
  return alignment_ > 0 ? alignment_ : (tokens.is_cuda() ? 16 : 1);
}

at::Tensor GroupedExperts::forward(const at::Tensor& tokens, const std::vector<int64_t>& tokens_per_expert) {
  if (!grouped(tokens)) return run_experts_loop(w1, w2, w3, tokens, tokens_per_expert, matmul);
  return run_experts_grouped_mm(w1, w2, w3, tokens, tokens_per_expert, alignment(tokens), grouped_matmul);
}

// A product seam (float8's grouped GEMM) takes the groups' sizes on the host.
bool GroupedExperts::runs_on_device_counts(const at::Tensor& tokens) const {
  return grouped(tokens) && !grouped_matmul && !matmul;
}

at::Tensor GroupedExperts::forward_on_device_counts(const at::Tensor& tokens, const at::Tensor& counts) {
  if (!runs_on_device_counts(tokens)) return RoutedExperts::forward_on_device_counts(tokens, counts);
  return run_experts_grouped_mm_on_device(w1, w2, w3, tokens, counts, alignment(tokens));
}

}  // namespace titan
