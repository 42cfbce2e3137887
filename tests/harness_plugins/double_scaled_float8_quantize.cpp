// The `double_scaled_float8` mutant's cast, linked in place of
// plugins/float8/float8_quantize.cpp: the scale is applied a second time
// before the cast, a bug titan-conformance's precision.loss must catch.
#include <ATen/ATen.h>

#include "float8_scaling.h"

namespace titan::float8 {

Quantized quantize_with_scale(const at::Tensor& x, Format format, const at::Tensor& scale) {
  at::Tensor scaled = x.detach().to(at::kFloat) * scale;
  scaled = scaled * scale;
  return {encode(scaled, format, /*saturate=*/true), scale, format};
}

}  // namespace titan::float8
