// The op cache, its record/replay wrappers and the replaying autograd
// functions (linear: grad-input and grad-weight from the input and weight;
// attention: the softmax backward from the saved weights).
#include "per_op_sac.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <cmath>

#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan::activation_checkpoint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local OpCache* current_cache = nullptr;

at::Tensor next_saved(OpCache& cache) {
  if (cache.cursor >= cache.outputs.size()) {
    throw Error("activation_checkpoint (op): the recompute asked for more saved outputs than the forward kept; "
                "the block's ops ran in another order");
  }
  return cache.outputs[cache.cursor++];
}

// Forward: the saved output. Backward: linear's, from the input and weight.
struct ReplayLinear : torch::autograd::Function<ReplayLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& saved) {
    ctx->save_for_backward({input, weight});
    return saved;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1];
    at::Tensor grad = grads[0];
    at::Tensor grad_input = at::matmul(grad, weight);
    at::Tensor grad_weight = at::matmul(grad.reshape({-1, grad.size(-1)}).t(), input.reshape({-1, input.size(-1)}));
    return {grad_input, grad_weight, at::Tensor()};
  }
};

// Forward: the saved output. Backward: attention's from the saved weights
// p (o = p v, p = softmax(q k^T / sqrt(d)) under the causal mask).
struct ReplayAttention : torch::autograd::Function<ReplayAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& saved_output, const at::Tensor& weights) {
    ctx->save_for_backward({q, k, v, weights});
    return saved_output;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &p = saved[3];
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    at::Tensor grad_output = grads[0];
    at::Tensor grad_v = at::matmul(p.transpose(-2, -1), grad_output);
    at::Tensor grad_p = at::matmul(grad_output, v.transpose(-2, -1));
    at::Tensor grad_scores = p * (grad_p - (grad_p * p).sum(-1, /*keepdim=*/true));
    at::Tensor grad_q = at::matmul(grad_scores, k) * scale;
    at::Tensor grad_k = at::matmul(grad_scores.transpose(-2, -1), q) * scale;
    return {grad_q, grad_k, grad_v, at::Tensor(), at::Tensor()};
  }
};

// k, v repeated to q's head count (grouped-query attention); autograd sums
// the repeats' gradients back.
at::Tensor repeat_heads(const at::Tensor& kv, int64_t heads) {
  return kv.size(1) == heads ? kv : kv.repeat_interleave(heads / kv.size(1), 1);
}

}  // namespace

int64_t OpCache::saved_bytes() const {
  int64_t bytes = 0;
  for (const auto& tensor : outputs) bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return bytes;
}

OpCacheScope::OpCacheScope(OpCache* cache) : previous_(current_cache) { current_cache = cache; }
OpCacheScope::~OpCacheScope() { current_cache = previous_; }
OpCache* OpCacheScope::current() { return current_cache; }

at::Tensor SacLinear::forward(const at::Tensor& input) {
  OpCache* cache = current_cache;
  if (!cache || forced_) return inner().forward(input);
  // TorchTitan's count: the 1st, 3rd, ... matmul of the block are kept.
  const bool kept = cache->matmuls++ % 2 == 0;
  if (!kept) return inner().forward(input);
  if (cache->mode == OpCache::Mode::record) {
    at::Tensor output = inner().forward(input);
    cache->outputs.push_back(output);
    return output;
  }
  const auto& weight = static_cast<const Linear&>(inner()).weight;
  return ReplayLinear::apply(input, weight, next_saved(*cache));
}

at::Tensor SacAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& documents) {
  OpCache* cache = current_cache;
  if (!cache) return inner_->forward(q, k, v, documents);
  at::Tensor key = repeat_heads(k, q.size(1)), value = repeat_heads(v, q.size(1));
  if (cache->mode == OpCache::Mode::record) {
    auto [output, weights] = compat::causal_attention_with_weights(q, key, value, documents);
    cache->outputs.push_back(output);
    cache->outputs.push_back(weights);
    return output;
  }
  at::Tensor output = next_saved(*cache);
  at::Tensor weights = next_saved(*cache);
  return ReplayAttention::apply(q, key, value, output, weights);
}

}  // namespace titan::activation_checkpoint
