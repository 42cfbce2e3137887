// The fused CPU kernels (cpu_kernels_avx2.cpp) put into a model through the
// layer seam: RMSNorm, rotary embedding, SwiGLU and the output projection +
// cross-entropy, forward and backward, faster than the ATen path they
// replace. Each falls back to that ATen path for meta or non-CPU tensors,
// dtypes other than fp32, and CPUs without AVX2 + FMA. Plugin-private header.
#pragma once
#include <memory>

#include "titan/layers.hpp"
#include "titan/model.hpp"

namespace titan::fused {

// Whether this CPU runs the kernels (AVX2 and FMA).
bool cpu_kernels_supported();

// RMSNorm over the last dim; fp32 input and weight.
class CpuRMSNorm : public LayerWrapper {
 public:
  explicit CpuRMSNorm(std::shared_ptr<RMSNorm> inner) : LayerWrapper(inner), norm_(std::move(inner)) {}
  at::Tensor forward(const at::Tensor &input) override;

 private:
  std::shared_ptr<RMSNorm> norm_;
};

// Rotary embedding on interleaved pairs; x may be any strided view whose
// head_dim is contiguous. Its backward rotates the gradient back.
class CpuRotary : public Rotary {
 public:
  at::Tensor forward(const at::Tensor &x, const at::Tensor &cos, const at::Tensor &sin) override;
};

// silu(gate) * up in one pass; backward in one pass.
class CpuSwiGLU : public SwiGLU {
 public:
  at::Tensor forward(const at::Tensor &gate, const at::Tensor &up) override;
};

// The loss that goes with DeferredOutputHead (emulated_layers.h): hidden
// [batch, seq, dim], labels [batch, seq] (-100 ignored) -> mean
// cross-entropy of hidden @ weight^T. Logits are made for a block of
// tokens at a time, at most tokens x `chunk` of them (the footprint of one
// `chunk`-column vocabulary slice of all tokens); when a gradient is wanted
// the forward turns each block into its logits' gradient at once and
// finishes grad_hidden and grad_weight with two GEMMs, so the backward only
// scales them (no logits recomputed: three GEMMs, as ATen).
LossFn cpu_chunked_linear_cross_entropy(at::Tensor weight, int64_t chunk);

}  // namespace titan::fused
