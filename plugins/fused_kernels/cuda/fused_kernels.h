// Launch functions of Titan's fused CUDA kernels. Plain CUDA C++ (raw
// pointers, sizes, a stream) with no LibTorch, so the kernels build with nvcc
// alone and the LibTorch glue stays in the plugin's .cpp files.
// T is float or __nv_bfloat16; all arithmetic and accumulation is fp32.
// Every function only enqueues work on `stream` (no host synchronisation)
// and returns nullptr, or a static message naming what failed.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace titan::fused_cuda {

using Status = const char*;  // nullptr: queued

// RMSNorm over the last dim of x [rows, dim], TorchTitan's rounding:
// y = T(x * rstd) * weight with rstd = 1/sqrt(mean(x^2) + eps) saved per row.
template <class T>
Status rmsnorm_forward(const T* x, const T* weight, T* y, float* rstd, int64_t rows, int64_t dim, float eps,
                       cudaStream_t stream);
// fp32 scratch for the weight gradient's per-row-group partial sums.
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim);
template <class T>
Status rmsnorm_backward(const T* grad_y, const T* x, const T* weight, const float* rstd, T* grad_x, T* grad_weight,
                        void* workspace, int64_t rows, int64_t dim, cudaStream_t stream);

// Rotary embedding on q [batch, seq, q_heads, head_dim] and k [batch, seq,
// kv_heads, head_dim] (contiguous) with Meta's interleaved pairs
// (x[2i], x[2i+1]) and fp32 angle tables cos/sin [seq, head_dim / 2].
// Out may alias in. Backward rotates the gradients by the opposite angle.
struct RopeShape {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
};
template <class T>
Status rope_forward(const T* q, const T* k, T* q_out, T* k_out, const float* cos, const float* sin,
                    RopeShape shape, cudaStream_t stream);
template <class T>
Status rope_backward(const T* grad_q_out, const T* grad_k_out, T* grad_q, T* grad_k, const float* cos,
                     const float* sin, RopeShape shape, cudaStream_t stream);

// SwiGLU's elementwise part on n elements: out = silu(a) * b.
template <class T>
Status swiglu_forward(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);
template <class T>
Status swiglu_backward(const T* grad_out, const T* a, const T* b, T* grad_a, T* grad_b, int64_t n,
                       cudaStream_t stream);

// Cross-entropy fused with the output projection: logits = hidden [tokens,
// dim] @ weight[vocab, dim]^T are made `chunk` vocabulary columns at a time
// with an online logsumexp, so [tokens, vocab] logits never exist. Loss is
// the mean over labels != ignore_index (PyTorch's default reduction).
struct CrossEntropyShape {
  int64_t tokens, dim, vocab, chunk;
  int64_t ignore_index = -100;
};
size_t chunked_cross_entropy_forward_workspace_bytes(CrossEntropyShape shape);
size_t chunked_cross_entropy_backward_workspace_bytes(CrossEntropyShape shape);
// loss: one fp32 on the device; lse [tokens] fp32, kept for backward.
template <class T>
Status chunked_cross_entropy_forward(cublasHandle_t cublas, const T* hidden, const T* weight, const int64_t* labels,
                                     float* loss, float* lse, void* workspace, CrossEntropyShape shape,
                                     cudaStream_t stream);
// grad_loss: one fp32 on the device (no host read-back inside the step).
template <class T>
Status chunked_cross_entropy_backward(cublasHandle_t cublas, const T* hidden, const T* weight, const int64_t* labels,
                                      const float* lse, const float* grad_loss, T* grad_hidden, T* grad_weight,
                                      void* workspace, CrossEntropyShape shape, cudaStream_t stream);

}  // namespace titan::fused_cuda
