// Bit-level encode (float32 -> code) and a 256-entry decode table per
// format. Both are exact: every code's value is a float32.
#include "float8_codec.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace titan::float8 {

namespace {

const FormatInfo kE4m3fn{4, 3, 7, 448.0f, 0x7E, false};
const FormatInfo kE5m2{5, 2, 15, 57344.0f, 0x7B, true};

float decode_bits(uint8_t code, const FormatInfo& f) {
  const bool negative = code & 0x80;
  const int exponent = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int all_ones = (1 << f.exponent_bits) - 1;
  float magnitude;
  if (f.has_infinity && exponent == all_ones) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (!f.has_infinity && exponent == all_ones && mantissa == (1 << f.mantissa_bits) - 1) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<float>((1 << f.mantissa_bits) + mantissa), exponent - f.bias - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

struct Table {
  std::array<float, 256> values;
  explicit Table(const FormatInfo& f) {
    for (int code = 0; code < 256; ++code) values[code] = decode_bits(static_cast<uint8_t>(code), f);
  }
};

const Table& table(Format format) {
  static const Table e4m3fn(kE4m3fn), e5m2(kE5m2);
  return format == Format::e4m3fn ? e4m3fn : e5m2;
}

}  // namespace

const FormatInfo& info(Format format) { return format == Format::e4m3fn ? kE4m3fn : kE5m2; }
const char* name(Format format) { return format == Format::e4m3fn ? "e4m3fn" : "e5m2"; }

uint8_t encode(float value, Format format, bool saturate) {
  const FormatInfo& f = info(format);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude_bits = bits & 0x7FFFFFFFu;
  const uint8_t overflow = saturate ? f.max_code : (f.has_infinity ? 0x7C : 0x7F);
  if (magnitude_bits > 0x7F800000u) return sign | 0x7F;             // NaN
  if (magnitude_bits == 0x7F800000u) return sign | overflow;        // +-inf
  if (magnitude_bits == 0) return sign;                             // +-0
  const int exponent = static_cast<int>(magnitude_bits >> 23) - 127;  // of a normal float32
  const int min_normal_exponent = 1 - f.bias;
  uint32_t code;
  if (exponent < min_normal_exponent) {
    // Subnormal in the target (or below): the code is the value in units of
    // the smallest subnormal 2^(1 - bias - m), rounded to an integer; a
    // carry into 2^m lands on the smallest normal's code, as it should.
    float magnitude;
    std::memcpy(&magnitude, &magnitude_bits, sizeof magnitude);
    const float units = std::ldexp(magnitude, f.mantissa_bits - min_normal_exponent);  // exact: a power-of-2 scale
    code = static_cast<uint32_t>(std::nearbyint(units));  // default rounding mode: ties to even
  } else {
    uint32_t mantissa = (magnitude_bits & 0x7FFFFFu) | 0x800000u;  // 24 significant bits
    const int drop = 23 - f.mantissa_bits;
    uint32_t kept = mantissa >> drop;
    const uint32_t rest = mantissa & ((1u << drop) - 1);
    const uint32_t half = 1u << (drop - 1);
    if (rest > half || (rest == half && (kept & 1))) ++kept;
    int biased = exponent + f.bias;
    if (kept == (2u << f.mantissa_bits)) {  // rounded up to the next binade
      kept >>= 1;
      ++biased;
    }
    if (biased > (1 << f.exponent_bits) - 1) return sign | overflow;
    code = (static_cast<uint32_t>(biased) << f.mantissa_bits) | (kept & ((1u << f.mantissa_bits) - 1));
  }
  if (code > f.max_code) return sign | overflow;
  return sign | static_cast<uint8_t>(code);
}

float decode(uint8_t code, Format format) { return table(format).values[code]; }

at::ScalarType native_dtype(Format format) {
  return format == Format::e4m3fn ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

// LibTorch's float8 casts round to nearest even, keep subnormals and map
// NaN to S.1111.111 as encode() does (checked code for code in
// tests/plugins/float8_test.cpp); they run on any device, and vectorized.
at::Tensor encode(const at::Tensor& values, Format format, bool saturate) {
  at::Tensor input = values.to(at::kFloat);
  if (saturate) input = input.clamp(-info(format).max, info(format).max);  // NaN stays NaN
  return input.to(native_dtype(format)).view(at::kByte);
}

at::Tensor decode(const at::Tensor& codes, Format format) {
  return codes.contiguous().view(native_dtype(format)).to(at::kFloat);
}

at::Tensor encode_exactly(const at::Tensor& values, Format format, bool saturate) {
  at::Tensor input = values.to(at::kFloat).contiguous();
  at::Tensor codes = at::empty(input.sizes(), input.options().dtype(at::kByte));
  const float* in = input.data_ptr<float>();
  uint8_t* out = codes.data_ptr<uint8_t>();
  at::parallel_for(0, input.numel(), 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = encode(in[i], format, saturate);
  });
  return codes;
}

}  // namespace titan::float8
