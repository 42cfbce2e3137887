// The dense SwiGLU feed-forward, w2(silu(w1 x) * w3 x), as a core layer:
// Qwen3's dense blocks and a MoE layer's shared experts use it. Its
// projections are core Linears and its elementwise part the SwiGLU seam,
// each looked up by name at every call, so TP, float8 and fused kernels
// swap them by path ("layers.3.feed_forward.w1", "....moe.shared_experts.w2").
#pragma once
#include "titan/layers.hpp"

namespace titan {

class FeedForward : public Layer {
 public:
  FeedForward(int64_t dim, int64_t hidden_dim, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x) override;
};

}  // namespace titan
