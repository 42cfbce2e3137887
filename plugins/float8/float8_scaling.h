// Dynamic scaling as torchao computes it: scale = max_fp8 / max(amax,
// 1e-12) in float64, stored as float32 (optionally floored to a power of
// two); codes = saturating cast of x * scale; values = code / scale. Scales
// are per tensor or per row/column ("axiswise": amax along one dim).
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "float8_codec.h"

namespace titan::float8 {

enum class Granularity { tensorwise, axiswise };

// How one operand of one matmul is cast: left in high precision, or to
// `format` with tensorwise or axiswise scales.
struct CastSpec {
  bool high_precision = false;
  Format format = Format::e4m3fn;
  Granularity granularity = Granularity::tensorwise;
};

// Float8 codes (uint8) and the float32 scale they were multiplied by: a
// 0-dim tensor (tensorwise) or shaped like the codes with the reduced dim
// of size 1 (axiswise).
struct Quantized {
  at::Tensor codes;
  at::Tensor scale;
  Format format = Format::e4m3fn;
};

at::Tensor amax_to_scale(const at::Tensor& amax, Format format, bool round_to_power_of_2);
// max |x| over the tensor (0-dim), or along `reduce_dim` (kept as size 1), in float32.
at::Tensor amax_of(const at::Tensor& x, Granularity granularity, int64_t reduce_dim);
// codes = saturating cast of x (as float32) * scale.
Quantized quantize_with_scale(const at::Tensor& x, Format format, const at::Tensor& scale);
// Scales from x's own amax, then the cast.
Quantized quantize(const at::Tensor& x, const CastSpec& spec, int64_t reduce_dim, bool round_to_power_of_2);
// code values / scale, float32.
at::Tensor dequantize(const Quantized& q);

// torchao's Float8LinearConfig.from_recipe_name: the cast of every operand
// of the three matmuls of a linear (output = input @ weight^T, grad_input =
// grad_output @ weight, grad_weight = grad_output^T @ input).
struct Recipe {
  std::string name;
  CastSpec input, weight, grad_output;  // output matmul; grad_output also for grad_input
  CastSpec weight_for_grad_input, input_for_grad_weight, grad_output_for_grad_weight;
  bool round_scales_to_power_of_2 = false;
};

// x cast as `spec` says for a matmul contracting `contraction_dim` (the
// dim an axiswise scale reduces), the scales rounded as `recipe` says.
Quantized cast(const at::Tensor& x, const CastSpec& spec, int64_t contraction_dim, const Recipe& recipe);

// tensorwise | rowwise | rowwise_with_gw_hp; throws naming the known ones.
Recipe recipe_from_name(const std::string& name);
const char* recipe_names();  // "tensorwise, rowwise, rowwise_with_gw_hp"

}  // namespace titan::float8
