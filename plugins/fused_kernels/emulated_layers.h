// The fused kernels' CPU emulations put into a model through the layer seam
// (option `emulate`): RMSNorm, rotary embedding and SwiGLU whose forward and
// backward are the kernels' algorithms, and the output head deferred into a
// chunked linear + cross-entropy loss, so the [tokens, vocab] logits are
// never built. cuda_layers.h has the same layers over the kernels
// themselves; these are slower than ATen and exist to test the wiring.
// Plugin-private header.
#pragma once
#include <memory>

#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan::fused {

// Forward and backward as cuda/rmsnorm.cu computes them (emulated).
class EmulatedRMSNorm : public LayerWrapper {
 public:
  explicit EmulatedRMSNorm(std::shared_ptr<RMSNorm> inner) : LayerWrapper(inner), norm_(std::move(inner)) {}
  at::Tensor forward(const at::Tensor& input) override;

 private:
  std::shared_ptr<RMSNorm> norm_;
};

// Rotary embedding as cuda/rope.cu computes it (emulated); its backward
// rotates the gradient back.
class EmulatedRotary : public Rotary {
 public:
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) override;
};

// silu(gate) * up as cuda/swiglu.cu computes it (emulated).
class EmulatedSwiGLU : public SwiGLU {
 public:
  at::Tensor forward(const at::Tensor& gate, const at::Tensor& up) override;
};

// The output head, deferred: forward returns the hidden states; the loss
// below applies the head's weight chunk by chunk.
class DeferredOutputHead : public LayerWrapper {
 public:
  using LayerWrapper::LayerWrapper;
  at::Tensor forward(const at::Tensor& hidden) override { return hidden; }
};

// hidden [batch, seq, dim], labels [batch, seq] -> mean cross-entropy of
// hidden @ weight^T, computed `chunk` vocabulary columns at a time.
LossFn chunked_linear_cross_entropy(at::Tensor weight, int64_t chunk);

}  // namespace titan::fused
