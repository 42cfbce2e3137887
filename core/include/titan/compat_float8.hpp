// Float8 across LibTorch versions (the float8 plugin's compat seam): which
// builds have float8 dtypes and the `_scaled_mm` kernel. Codes travel as
// uint8 tensors everywhere, so callers never name a float8 dtype.
#pragma once
#include <ATen/core/Tensor.h>

namespace titan::compat {

// True when this LibTorch has float8 dtypes and `_scaled_mm` on a CUDA
// device that supports it (sm_89+). LibTorch 1.13: always false.
bool float8_scaled_mm_available();

// out = (a @ b^T) scaled, computed by `_scaled_mm` on the GPU: `a_codes`
// [M, K] and `b_codes` [N, K] are e4m3fn (or e5m2 where `a_e5m2` /
// `b_e5m2`) codes in uint8, `a_scale` / `b_scale` the float32 factors the
// values were multiplied by (scalars, or [M, 1] / [N, 1] rowwise).
// Throws where float8_scaled_mm_available() is false.
at::Tensor scaled_mm(const at::Tensor& a_codes, bool a_e5m2, const at::Tensor& a_scale, const at::Tensor& b_codes,
                     bool b_e5m2, const at::Tensor& b_scale, c10::ScalarType out_dtype);

}  // namespace titan::compat
