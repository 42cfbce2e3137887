// The OCP 8-bit floating-point formats torchao trains with, as uint8 codes:
// e4m3fn (weights, activations; max 448, no infinities, NaN = S.1111.111)
// and e5m2 (gradients; max 57344, IEEE-like with infinities). Encoding
// rounds to nearest, ties to even, keeps subnormals, and saturates (clamps
// to +-max, as torchao's to_fp8_saturated) unless asked not to.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace titan::float8 {

enum class Format { e4m3fn, e5m2 };

struct FormatInfo {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max;          // largest finite value
  uint8_t max_code;   // its code (positive)
  bool has_infinity;  // e5m2: S.11111.00
};

const FormatInfo& info(Format format);
const char* name(Format format);

// One value: NaN -> 0x7F with the input's sign; with `saturate`, +-inf and
// values past max -> +-max; without, they -> inf (e5m2) or NaN (e4m3fn).
uint8_t encode(float value, Format format, bool saturate = true);
float decode(uint8_t code, Format format);

// LibTorch's native dtype of the format (at::kFloat8_e4m3fn / kFloat8_e5m2).
at::ScalarType native_dtype(Format format);

// Elementwise over a tensor (any shape, any device) -> uint8 codes, and
// back to float32, through LibTorch's native float8 casts.
at::Tensor encode(const at::Tensor& values, Format format, bool saturate = true);
at::Tensor decode(const at::Tensor& codes, Format format);
// The same as encode(), value by value through the scalar encode() above:
// the written-out reference the native casts are checked against.
at::Tensor encode_exactly(const at::Tensor& values, Format format, bool saturate = true);

}  // namespace titan::float8
