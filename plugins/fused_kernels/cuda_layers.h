// The fused CUDA kernels (cuda/) put into a model through the layer seam:
// the layers of emulated_layers.h, with autograd functions that launch the
// kernels on the current CUDA stream instead of running the emulations.
// CUDA builds only (TITAN_WITH_CUDA). Plugin-private header.
#pragma once
#include <memory>

#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan::fused {

// RMSNorm by cuda/rmsnorm.cu, forward and backward; fp32 or bf16, the input
// in the weight's dtype.
class CudaRMSNorm : public LayerWrapper {
 public:
  explicit CudaRMSNorm(std::shared_ptr<RMSNorm> inner) : LayerWrapper(inner), norm_(std::move(inner)) {}
  at::Tensor forward(const at::Tensor& input) override;

 private:
  std::shared_ptr<RMSNorm> norm_;
};

// Rotary embedding by cuda/rope.cu; its backward rotates the gradient back.
class CudaRotary : public Rotary {
 public:
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) override;
};

// silu(gate) * up by cuda/swiglu.cu.
class CudaSwiGLU : public SwiGLU {
 public:
  at::Tensor forward(const at::Tensor& gate, const at::Tensor& up) override;
};

// The loss that goes with DeferredOutputHead (emulated_layers.h): hidden
// [batch, seq, dim], labels [batch, seq] -> mean cross-entropy of hidden @
// weight^T by cuda/cross_entropy.cu, `chunk` vocabulary columns at a time.
LossFn cuda_chunked_linear_cross_entropy(at::Tensor weight, int64_t chunk);

}  // namespace titan::fused
