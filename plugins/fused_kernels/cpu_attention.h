// Causal attention for CPU training in fp32: a kernel (AVX2 + FMA, forward
// and a flash-style backward) faster than ATen's CPU flash attention for
// head_dim <= 128 up to seq 1024 (2048 on its AVX-512 path), and beyond
// while seq x head_dim <= 65536 (5x at the Llama debug shape), as an
// AttentionCore for the layer seam. Where it is not faster,
// or cannot run (not fp32 CPU tensors, meta tensors of the dry run, a CPU
// without AVX2/FMA), the layer takes ATen's path. Under block-causal
// attention it runs each document of a row as its own causal problem, so
// the keys of other documents cost nothing. Plugin-private header.
#pragma once
#include "titan/layers.hpp"

namespace titan::fused {

// Causal scaled-dot-product attention (scale 1/sqrt(head_dim)) of q [batch,
// heads, seq, head_dim] and k, v [batch, kv_heads, seq, head_dim]
// (grouped-query when kv_heads < heads): the kernel where it pays off,
// ATen's attention elsewhere.
class CpuAttention : public AttentionCore {
 public:
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& documents) override;
};

// Whether the kernel can run these inputs at all (fp32 CPU strided tensors
// of matching shapes, a CPU with AVX2 and FMA), and whether CpuAttention
// takes it (that, and a shape where it measured faster than ATen).
bool cpu_attention_kernel_supports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
bool cpu_attention_takes_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The kernel itself, differentiable, whatever the shape (tests, benchmark);
// requires cpu_attention_kernel_supports. `documents` ([batch, seq] ids,
// contiguous runs; undefined: one document a row) makes it block-causal.
at::Tensor cpu_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& documents = {});

}  // namespace titan::fused
