// clip_grad_norm: per-gradient norms in fp64 on CPU (fp32 foreach on GPU),
// combined in fp64 on the device, then one in-place scale; the host version
// reads the partial (to reduce it) and the total. The 2-norm of CPU
// gradients (the trainer's) is summed on the host in one pass per gradient.
#include "titan/grad_clip.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "titan/error.hpp"
#include "titan/host_value.hpp"
#include "sum_of_squares.hpp"

namespace titan {

namespace {

// The p-norm of a CPU gradient accumulated in fp64. ATen casts the whole
// input to the accumulation dtype first: for the 2-block 8B shape that was
// 3.5 GB of fp64 copies a step, half the step. Slices of 64 Ki elements
// (512 KiB in fp64, in cache) cost one pass instead.
at::Tensor fp64_norm(const at::Tensor& grad, double norm_type) {
  constexpr int64_t kSlice = int64_t{1} << 16;
  const int64_t count = grad.numel();
  if (count <= kSlice) return at::linalg_vector_norm(grad, norm_type, c10::nullopt, false, at::kDouble);
  const at::Tensor flat = grad.reshape({-1});
  std::vector<at::Tensor> slices;
  slices.reserve(static_cast<size_t>((count + kSlice - 1) / kSlice));
  for (int64_t begin = 0; begin < count; begin += kSlice) {
    at::Tensor slice = flat.narrow(0, begin, std::min(kSlice, count - begin));
    slices.push_back(at::linalg_vector_norm(slice, norm_type, c10::nullopt, false, at::kDouble));
  }
  // The norm of the slices' norms is the whole norm, for every p and for inf.
  return at::linalg_vector_norm(at::stack(slices), norm_type);
}

// Σ g² of a CPU gradient in fp64, read in place: blocks of a fixed size on
// ATen's threads, their sums added in order, so the bits do not depend on
// the thread count. A step of a small model spent more on the ops of
// fp64_norm (a cast, a norm, a stack per gradient) than on its math.
double cpu_sum_of_squares(const at::Tensor& grad) {
  constexpr int64_t kBlock = int64_t{1} << 15;
  at::Tensor dense = grad.contiguous();
  const at::ScalarType dtype = dense.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16) dense = dense.to(at::kFloat);
  const int64_t count = dense.numel();
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<double> sums(static_cast<size_t>(blocks));
  at::parallel_for(0, blocks, /*grain_size=*/8, [&](int64_t first, int64_t last) {
    for (int64_t block = first; block < last; ++block) {
      const int64_t begin = block * kBlock, n = std::min(kBlock, count - begin);
      switch (dense.scalar_type()) {
        case at::kDouble: sums[block] = sum_of_squares(dense.const_data_ptr<double>() + begin, n); break;
        case at::kBFloat16:
          sums[block] = sum_of_squares_bf16(reinterpret_cast<const uint16_t*>(dense.const_data_ptr()) + begin, n);
          break;
        default: sums[block] = sum_of_squares(dense.const_data_ptr<float>() + begin, n); break;
      }
    }
  });
  double total = 0;
  for (double sum : sums) total += sum;
  return total;
}

}  // namespace

at::Tensor clip_grad_norm_on_device(const std::vector<at::Tensor>& params, double max_norm, double norm_type,
                                    const NormTensorReduceFn& reduce, const std::vector<double>& weights) {
  if (!weights.empty() && weights.size() != params.size()) {
    throw Error("clip_grad_norm: " + std::to_string(weights.size()) + " weights for " +
                std::to_string(params.size()) + " parameters");
  }
  if (!(norm_type > 0)) {
    throw Error("clip_grad_norm: norm_type must be > 0 or infinity, got " + std::to_string(norm_type));
  }
  const bool inf_norm = std::isinf(norm_type);
  at::NoGradGuard no_grad;

  // Gradients grouped by device and dtype: a GPU takes one group's norms in
  // one foreach kernel (a tree reduction in fp32), the CPU each gradient's
  // in fp64; the foreach scale wants one dtype per list too. Meta tensors
  // (the dry run) stand for the GPU.
  struct Group {
    std::vector<at::Tensor> grads;
    std::vector<double> weights;  // |g|^p scales by weight: the norm by weight^(1/p)
  };
  std::map<std::tuple<int, int, int>, Group> groups;  // device type, index, dtype
  bool all_cpu = true;
  for (size_t index = 0; index < params.size(); ++index) {
    const at::Tensor& param = params[index];
    if (!param.defined()) continue;
    const at::Tensor& grad = param.grad();
    if (!grad.defined()) continue;
    if (grad.is_sparse()) throw Error("clip_grad_norm: sparse gradients are not supported");
    const at::Device device = grad.device();
    Group& group = groups[{static_cast<int>(device.type()), device.index(), static_cast<int>(grad.scalar_type())}];
    group.grads.push_back(grad);
    group.weights.push_back(weights.empty() || inf_norm ? 1.0 : weights[index]);
    all_cpu = all_cpu && grad.is_cpu();
  }

  // This rank's partial: sum of |g|^p, or max |g| (a NaN on any device stays).
  at::Tensor partial;
  std::optional<double> partial_on_host;  // the 2-norm of CPU gradients, summed here
  if (all_cpu && norm_type == 2.0) {
    double sum = 0;
    for (const auto& [kind, group] : groups) {
      for (size_t i = 0; i < group.grads.size(); ++i) sum += group.weights[i] * cpu_sum_of_squares(group.grads[i]);
    }
    partial_on_host = sum;
  } else {
    std::map<std::pair<int, int>, std::vector<at::Tensor>> norms_by_device;
    for (const auto& [kind, group] : groups) {
      std::vector<at::Tensor>& norms = norms_by_device[{std::get<0>(kind), std::get<1>(kind)}];
      const at::Tensor& first = group.grads.front();
      // CPU reductions accumulate fp32 sequentially (3e-5 relative error on
      // a 370k-element gradient, measured), so a sharded norm would not
      // match the whole one; fp64 makes both exact to ~1e-12. GPUs reduce
      // in trees.
      const bool tree_reduced = (first.is_cuda() || first.is_meta()) && first.scalar_type() != at::kDouble;
      std::vector<at::Tensor> group_norms;
      if (tree_reduced) {
        group_norms = at::_foreach_norm(group.grads, norm_type, at::kFloat);
      } else {
        for (const at::Tensor& grad : group.grads) group_norms.push_back(fp64_norm(grad, norm_type));
      }
      for (size_t i = 0; i < group_norms.size(); ++i) {
        const double weight = group.weights[i];
        norms.push_back(weight == 1.0 ? group_norms[i] : group_norms[i] * std::pow(weight, 1.0 / norm_type));
      }
    }
    for (auto& [device, norms] : norms_by_device) {
      at::Tensor stacked = at::stack(norms).to(at::kDouble);
      at::Tensor part = inf_norm ? stacked.max() : stacked.pow(norm_type).sum();
      if (!partial.defined()) {
        partial = part;
      } else {
        part = part.to(partial.device());
        partial = inf_norm ? at::maximum(partial, part) : partial + part;
      }
    }
  }

  if (partial_on_host && !reduce) {
    // Nothing else holds a part: the norm and the scale on the host, and no
    // scale where it is 1 (a gradient times 1 is itself, bit for bit).
    const double total = std::sqrt(*partial_on_host);
    const double coef = std::min(1.0, max_norm / (total + 1e-6));
    if (max_norm > 0 && std::isfinite(total) && coef < 1.0) {
      for (auto& [kind, group] : groups) {
        at::_foreach_mul_(group.grads, at::scalar_tensor(coef, group.grads.front().options()));
      }
    }
    return at::scalar_tensor(total, at::TensorOptions().dtype(at::kDouble));
  }
  if (partial_on_host) partial = at::scalar_tensor(*partial_on_host, at::TensorOptions().dtype(at::kDouble));
  if (!partial.defined()) partial = at::zeros({}, at::TensorOptions().dtype(at::kDouble));
  if (reduce) reduce(partial, inf_norm ? NormReduceOp::max : NormReduceOp::sum);
  at::Tensor total = inf_norm ? partial : partial.pow(1.0 / norm_type);
  if (max_norm <= 0) return total;
  // min(1, max_norm / (norm + 1e-6)): scaling by 1 leaves a gradient as it
  // was, bit for bit; a non-finite norm leaves them all alone.
  at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  coef = at::where(at::isfinite(total), coef, at::ones_like(coef));
  for (auto& [kind, group] : groups) {
    at::_foreach_mul_(group.grads, coef.to(group.grads.front().device(), group.grads.front().scalar_type()));
  }
  return total;
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type,
                      const NormReduceFn& reduce, const std::vector<double>& weights) {
  NormTensorReduceFn on_host;
  if (reduce) {
    on_host = [&reduce](at::Tensor& partial, NormReduceOp op) { partial.fill_(reduce(host_value<double>(partial), op)); };
  }
  return host_value<double>(clip_grad_norm_on_device(params, max_norm, norm_type, on_host, weights));
}

}  // namespace titan
