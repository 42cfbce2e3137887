// The cast to float8 codes (quantize_with_scale, float8_scaling.h), in a
// file of its own so that a test build can link a wrong cast in its place,
// with every other line of the plugin the real one, to check that
// titan-conformance catches it (tests/harness_plugins: double_scaled_float8).
#include "float8_scaling.h"

#include <ATen/ATen.h>

namespace titan::float8 {

Quantized quantize_with_scale(const at::Tensor& x, Format format, const at::Tensor& scale) {
  at::Tensor scaled = x.detach().to(at::kFloat) * scale;
  return {encode(scaled, format, /*saturate=*/true), scale, format};
}

}  // namespace titan::float8
