// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_: the
// trainer calls it between backward and the optimizer step.
#pragma once
#include <functional>
#include <limits>
#include <vector>

#include <ATen/core/Tensor.h>

namespace titan {

// How a partial norm combines over the ranks that hold other parts of the
// gradients: `sum` of |g|^p for a finite p, `max` of |g| for p = inf.
enum class NormReduceOp { sum, max };
using NormReduceFn = std::function<double(double partial, NormReduceOp op)>;
// The same on a tensor (a 0-dim fp64 partial, reduced in place): nothing
// leaves the device.
using NormTensorReduceFn = std::function<void(at::Tensor& partial, NormReduceOp op)>;

// Returns the total norm of the gradients of `params` (those without a
// gradient are skipped) before clipping; when max_norm > 0 and the norm
// exceeds it, scales every gradient in place by max_norm / (norm + 1e-6).
// A non-finite norm is returned with the gradients left untouched, so the
// caller can skip the step. norm_type: any p > 0, or infinity.
//
// Sharded or replicated gradients (issue 4): this rank's gradients are one
// part of the global gradient. Pass `reduce` to combine the local partial
// (sum of |g|^p, or max |g| for p = inf) across ranks before the root is
// taken, e.g. an all-reduce SUM over the dp_shard/tp groups that split the
// gradients, and never over replicas, which would count them twice. Empty:
// the local gradients are the whole gradient.
//
// `weights` (one per param, or empty for all 1): the share of a gradient
// this rank counts, e.g. 1 / (number of ranks holding the same copy) when
// `reduce` sums over every rank; ignored for the max norm.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type = 2.0,
                      const NormReduceFn& reduce = {}, const std::vector<double>& weights = {});

// The same without reading anything on the host (the trainer's step): the
// total norm comes back as a 0-dim fp64 tensor on the gradients' device and
// the scale is applied on the device (1 when the norm is not finite, so
// the gradients are left as they were).
at::Tensor clip_grad_norm_on_device(const std::vector<at::Tensor>& params, double max_norm, double norm_type = 2.0,
                                    const NormTensorReduceFn& reduce = {}, const std::vector<double>& weights = {});

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace titan
