// fp32 matrix products on CPU through oneDNN where it beats ATen's BLAS.
// ATen sends fp32 matmuls to MKL, whose SGEMM takes its AVX2 path on AMD
// CPUs; oneDNN (in the same LibTorch, reached through its
// `mkldnn::_linear_pointwise` op) uses AVX-512 there: 2.1x the GFLOP/s at
// the debug model's shapes on this project's AMD EPYC. Used by the
// fused_kernels plugin's CPU linear and by the CPU peak FLOP/s measurement.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan {

// Whether matmul_nt goes through oneDNN: LibTorch has the op and the CPU
// has AVX-512 (on AVX2-only CPUs both libraries run AVX2 kernels).
bool onednn_matmul_preferred();

// a @ b^T for 2-D fp32 CPU tensors of any strides (transposed views pass
// without a copy): oneDNN where preferred, else at::mm.
at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b);

}  // namespace titan
