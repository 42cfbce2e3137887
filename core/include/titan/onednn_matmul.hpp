// fp32 matrix products on CPU through oneDNN where it beats ATen's BLAS.
// ATen sends fp32 matmuls to MKL, whose SGEMM takes its AVX2 path on AMD
// CPUs; oneDNN (in the same LibTorch, reached through its
// `mkldnn::_linear_pointwise` op) uses AVX-512 there: 2.1x the GFLOP/s at
// the debug model's shapes on this project's AMD EPYC. Used by the
// fused_kernels plugin's CPU linear and by the CPU peak FLOP/s measurement.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace titan {

// Whether matmul_nt goes through oneDNN: LibTorch has the op and the CPU
// has AVX-512 (on AVX2-only CPUs both libraries run AVX2 kernels).
bool onednn_matmul_preferred();

// Below this many multiply-adds (m * k * n) a product goes to at::mm even
// where oneDNN is preferred: oneDNN's op costs about 20 µs a call to set up
// (a primitive looked up, its scratchpad allocated) against at::mm's 4, and
// the two take the same time near 256 x 256 x 256 (1 thread, AMD EPYC with
// AVX-512, 2026-11-30: 8 x 64 x 64 25 µs against 6; 128^3 75 against 56).
inline constexpr int64_t kOneDnnMinMultiplies = int64_t{1} << 22;

// a @ b^T for 2-D fp32 CPU tensors of any strides (transposed views pass
// without a copy): oneDNN where preferred and the product is large enough,
// else at::mm.
at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b);

}  // namespace titan
