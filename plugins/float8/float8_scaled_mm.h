// The float8 linear's GEMM on the GPU: LibTorch's `_scaled_mm` on codes the
// codec made. Codes travel as uint8 tensors everywhere, so callers never name
// a float8 dtype. Plugin-private header.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan::float8 {

// True when Titan was built with CUDA and the current CUDA device runs
// `_scaled_mm` (sm_89+).
bool scaled_mm_available();
// ... and `_scaled_grouped_mm` (compute capability 9.0 or 10.0).
bool grouped_scaled_mm_available();

// out = (a @ b^T) scaled, computed by `_scaled_mm` on the GPU: `a_codes`
// [M, K] and `b_codes` [N, K] are e4m3fn (or e5m2 where `a_e5m2` /
// `b_e5m2`) codes in uint8, `a_scale` / `b_scale` the float32 factors the
// values were multiplied by (scalars, or [M, 1] / [N, 1] rowwise).
// Throws where scaled_mm_available() is false.
at::Tensor scaled_mm(const at::Tensor& a_codes, bool a_e5m2, const at::Tensor& a_scale, const at::Tensor& b_codes,
                     bool b_e5m2, const at::Tensor& b_scale, c10::ScalarType out_dtype);

// a @ b^T per group, computed by `_scaled_grouped_mm` (bfloat16 out) on
// e4m3fn codes in uint8, scales as scaled_mm's (the factors the values
// were multiplied by): a [M, K] (scale [M, 1]) with b [E, N, K] (scale
// [E, N, 1]), the groups a's rows -> [M, N]; or a [N, T] (scale [E, N])
// with b [K, T] (scale [E, K]), the groups the shared dim T -> [E, N, K].
// `group_ends` (int32, on the device) ends each group, each a multiple of
// 16. Throws where grouped_scaled_mm_available() is false.
at::Tensor scaled_grouped_mm(const at::Tensor& a_codes, const at::Tensor& a_scale, const at::Tensor& b_codes,
                             const at::Tensor& b_scale, const at::Tensor& group_ends);

}  // namespace titan::float8
