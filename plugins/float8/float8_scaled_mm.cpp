// Float8 GEMMs through LibTorch's `_scaled_mm` (CUDA, sm_89+). Titan keeps
// float8 codes as uint8 tensors (the codec in float8_codec.cpp makes them);
// here they are viewed as LibTorch's native float8 dtypes.
#include "float8_scaled_mm.h"

#include <ATen/ATen.h>

#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan::float8 {

bool scaled_mm_available() { return compat::cuda_compute_capability() >= 89; }

bool grouped_scaled_mm_available() {
  const int capability = compat::cuda_compute_capability();
  return capability == 90 || capability == 100;  // what LibTorch's kernel accepts
}

namespace {

// `_scaled_mm` multiplies by the factors that turn codes back into values:
// the reciprocal of the scale the codes were made with, as [M, 1] / [1, N]
// for rowwise scales or a 0-dim tensor for tensorwise ones.
at::Tensor dequantize_factor(const at::Tensor& scale) { return scale.to(at::kFloat).reciprocal(); }

}  // namespace

at::Tensor scaled_mm(const at::Tensor& a_codes, bool a_e5m2, const at::Tensor& a_scale, const at::Tensor& b_codes,
                     bool b_e5m2, const at::Tensor& b_scale, c10::ScalarType out_dtype) {
  if (!scaled_mm_available()) {
    throw Error(std::string("float8: _scaled_mm needs a CUDA device of compute capability 8.9 or newer (LibTorch ") +
                torch_version_string() + ", " + compat::cuda_summary() +
                "); use the float8 plugin's emulation (emulate: true)");
  }
  if (a_codes.dim() != 2 || b_codes.dim() != 2 || a_codes.size(1) != b_codes.size(1)) {
    throw Error("float8 scaled_mm: expected a [M, K] and b [N, K], got " + std::to_string(a_codes.dim()) + "-d and " +
                std::to_string(b_codes.dim()) + "-d operands with mismatched K");
  }
  // Row-major a, column-major b (b [N, K] row-major is b^T column-major).
  at::Tensor a = a_codes.contiguous().view(a_e5m2 ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn);
  at::Tensor b = b_codes.contiguous().view(b_e5m2 ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn).t();
  at::Tensor scale_a = dequantize_factor(a_scale);
  at::Tensor scale_b = dequantize_factor(b_scale);
  // _scaled_mm takes tensorwise x tensorwise or rowwise x rowwise: a
  // tensorwise scale beside a rowwise one (rowwise_with_gw_hp's
  // grad_input) is repeated per row.
  const bool rowwise = scale_a.dim() == 2 || scale_b.dim() == 2;
  if (rowwise) {
    scale_a = scale_a.reshape({-1, 1}).expand({a.size(0), 1}).contiguous();
    scale_b = scale_b.reshape({1, -1}).expand({1, b.size(1)}).contiguous();  // [N, 1] -> [1, N]
  }
  try {
    return at::_scaled_mm(a, b, scale_a, scale_b, std::nullopt, std::nullopt, out_dtype, /*use_fast_accum=*/false);
  } catch (const c10::Error& error) {
    throw Error("float8 scaled_mm of [" + std::to_string(a.size(0)) + ", " + std::to_string(a.size(1)) + "] x [" +
                std::to_string(b.size(0)) + ", " + std::to_string(b.size(1)) + "] (" +
                (rowwise ? "rowwise" : "tensorwise") + " scales): " + error.what_without_backtrace() +
                " (_scaled_mm needs every dim a multiple of 16; set emulate: true or filter the layer with "
                "filter_fqns)");
  }
}

at::Tensor scaled_grouped_mm(const at::Tensor& a_codes, const at::Tensor& a_scale, const at::Tensor& b_codes,
                             const at::Tensor& b_scale, const at::Tensor& group_ends) {
  if (!grouped_scaled_mm_available()) {
    throw Error(std::string("float8: _scaled_grouped_mm needs a CUDA device of compute capability 9.0 or 10.0 (") +
                compat::cuda_summary() + "); use the float8 plugin's emulation (emulate: true)");
  }
  // Row-major a, column-major b in its last two dims (b [.., N, K] row-major
  // is its transpose column-major); one factor per row of a and b, per
  // group where the groups run along the shared dim.
  at::Tensor a = a_codes.contiguous().view(at::kFloat8_e4m3fn);
  at::Tensor b = b_codes.contiguous().view(at::kFloat8_e4m3fn).transpose(-2, -1);
  at::Tensor a_factors = dequantize_factor(a_scale).reshape({-1}).contiguous();
  at::Tensor b_factors = (b_codes.dim() == 3 ? dequantize_factor(b_scale).reshape({b_codes.size(0), b_codes.size(1)})
                                             : dequantize_factor(b_scale).reshape({-1}))
                             .contiguous();
  try {
    return at::_scaled_grouped_mm(a, b, a_factors, b_factors, group_ends, std::nullopt, std::nullopt, at::kBFloat16,
                                  /*use_fast_accum=*/false);
  } catch (const c10::Error& error) {
    throw Error("float8 scaled_grouped_mm of a " + std::to_string(a.dim()) + "-d [" + std::to_string(a.size(0)) +
                ", " + std::to_string(a.size(1)) + "] by a " + std::to_string(b.dim()) + "-d b in " +
                std::to_string(group_ends.numel()) + " groups: " + error.what_without_backtrace() +
                " (every dim and group a multiple of 16; set emulate: true)");
  }
}

}  // namespace titan::float8
