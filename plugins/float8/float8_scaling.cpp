// Scales, casts and torchao's three recipes (the cast itself,
// quantize_with_scale, in float8_quantize.cpp).
#include "float8_scaling.h"

#include <ATen/ATen.h>

#include <cmath>

#include "titan/error.hpp"

namespace titan::float8 {

namespace {

// torchao's EPS: an all-zero tensor gets a large finite scale, not inf.
constexpr double kMinAmax = 1e-12;

// On the scale's own device (a GPU's scales never visit the host).
at::Tensor floor_to_power_of_2(const at::Tensor& scale) {
  at::Tensor exponent = std::get<1>(at::frexp(scale));  // scale = f * 2^exponent, f in [0.5, 1)
  at::Tensor floored = at::ldexp(at::ones_like(scale), exponent - 1);
  return at::where(at::isfinite(scale) & (scale > 0), floored, scale);
}

}  // namespace

at::Tensor amax_to_scale(const at::Tensor& amax, Format format, bool round_to_power_of_2) {
  at::Tensor scale = (static_cast<double>(info(format).max) / amax.to(at::kDouble).clamp_min(kMinAmax)).to(at::kFloat);
  return round_to_power_of_2 ? floor_to_power_of_2(scale) : scale;
}

at::Tensor amax_of(const at::Tensor& x, Granularity granularity, int64_t reduce_dim) {
  at::Tensor magnitude = x.detach().to(at::kFloat).abs();
  if (granularity == Granularity::tensorwise) {
    return magnitude.numel() == 0 ? at::zeros({}, magnitude.options()) : magnitude.max();
  }
  return std::get<0>(magnitude.max(reduce_dim, /*keepdim=*/true));
}

Quantized quantize(const at::Tensor& x, const CastSpec& spec, int64_t reduce_dim, bool round_to_power_of_2) {
  at::Tensor scale = amax_to_scale(amax_of(x, spec.granularity, reduce_dim), spec.format, round_to_power_of_2);
  return quantize_with_scale(x, spec.format, scale);
}

at::Tensor dequantize(const Quantized& q) { return decode(q.codes, q.format) / q.scale; }

Quantized cast(const at::Tensor& x, const CastSpec& spec, int64_t contraction_dim, const Recipe& recipe) {
  return quantize(x, spec, contraction_dim, recipe.round_scales_to_power_of_2);
}

const char* recipe_names() { return "tensorwise, rowwise, rowwise_with_gw_hp"; }

Recipe recipe_from_name(const std::string& name) {
  const CastSpec e4m3_tensorwise{false, Format::e4m3fn, Granularity::tensorwise};
  const CastSpec e5m2_tensorwise{false, Format::e5m2, Granularity::tensorwise};
  const CastSpec e4m3_axiswise{false, Format::e4m3fn, Granularity::axiswise};
  const CastSpec high_precision{true, Format::e4m3fn, Granularity::tensorwise};
  Recipe recipe;
  recipe.name = name;
  if (name == "tensorwise") {
    // e4m3 input and weight, e5m2 gradients, one scale per tensor.
    recipe.input = recipe.input_for_grad_weight = e4m3_tensorwise;
    recipe.weight = recipe.weight_for_grad_input = e4m3_tensorwise;
    recipe.grad_output = recipe.grad_output_for_grad_weight = e5m2_tensorwise;
  } else if (name == "rowwise") {
    // Every operand e4m3 (gradients too), scaled along each matmul's
    // contraction dim, scales floored to powers of two.
    recipe.input = recipe.input_for_grad_weight = e4m3_axiswise;
    recipe.weight = recipe.weight_for_grad_input = e4m3_axiswise;
    recipe.grad_output = recipe.grad_output_for_grad_weight = e4m3_axiswise;
    recipe.round_scales_to_power_of_2 = true;
  } else if (name == "rowwise_with_gw_hp") {
    // output and grad_input as rowwise but the weight tensorwise for
    // grad_input; grad_weight from the high-precision operands.
    recipe.input = e4m3_axiswise;
    recipe.weight = e4m3_axiswise;
    recipe.grad_output = e4m3_axiswise;
    recipe.weight_for_grad_input = e4m3_tensorwise;
    recipe.input_for_grad_weight = recipe.grad_output_for_grad_weight = high_precision;
  } else {
    throw Error("float8: unknown recipe_name '" + name + "'; expected one of " + recipe_names());
  }
  return recipe;
}

}  // namespace titan::float8
