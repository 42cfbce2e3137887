// The CPU causal-attention kernel's raw interface (fp32, AVX2 + FMA): one
// (batch, head) of the forward or one (batch, kv head) of the backward per
// call, on pointers and strides, so cpu_attention_avx2.cpp needs no ATen
// header (nothing inline from LibTorch gets compiled there with AVX2 and
// picked by the linker for the rest of the program). Plugin-private.
#pragma once
#include <cstddef>
#include <cstdint>

namespace titan::fused::cpu_attention_avx2 {

// A [batch, heads, seq, head_dim] tensor whose head_dim stride is 1.
struct View {
  float* data;
  int64_t stride_batch, stride_head, stride_seq;
  float* row(int64_t b, int64_t h, int64_t s) const {
    return data + b * stride_batch + h * stride_head + s * stride_seq;
  }
};

// q [batch, heads, seq, head_dim], k/v [batch, kv_heads, seq, head_dim],
// heads a multiple of kv_heads; causal, scores scaled by `scale`.
struct Problem {
  int64_t batch, heads, kv_heads, seq, head_dim;
  float scale;
};

// Whether forward/backward run their AVX-512 path (16 lanes: the CPU has
// AVX-512F and head_dim is a multiple of 16) rather than AVX2.
bool uses_avx512(int64_t head_dim);

// Scratch floats one call needs (the caller owns it, one per thread).
size_t forward_workspace_floats(const Problem& problem);
size_t backward_workspace_floats(const Problem& problem);

// out and lse ([batch, heads, seq], contiguous: the natural log of each
// row's softmax denominator, scores scaled) for head h of batch b.
void forward(const Problem& problem, const View& q, const View& k, const View& v, const View& out, float* lse,
             int64_t b, int64_t h, float* workspace);

// dq of every head of kv head `kv_head` and that kv head's dk, dv, for batch
// b: softmax probabilities recomputed from lse (flash-style).
void backward(const Problem& problem, const View& q, const View& k, const View& v, const View& out,
              const View& grad_out, const float* lse, const View& dq, const View& dk, const View& dv, int64_t b,
              int64_t kv_head, float* workspace);

}  // namespace titan::fused::cpu_attention_avx2
