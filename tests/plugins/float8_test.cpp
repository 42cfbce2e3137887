// The float8 plugin's arithmetic, from the OCP 8-bit floating point spec
// (OFP8, v1.0) and torchao's recipe definitions rather than from the code:
// every code of e4m3fn and e5m2 decodes to the value its sign, exponent and
// mantissa fields give; a grid of values (ties, subnormals, overflow, NaN)
// encodes to hand-written codes; a float8 linear's forward and backward
// equal a float64 reference written here for every recipe; the plugin
// converts by module path and refuses bad options by name.
#include "doctest_torch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "float8_codec.h"
#include "float8_grouped_mm.h"
#include "float8_linear.h"
#include "float8_scaling.h"
#include "titan/config.hpp"
#include "titan/moe.hpp"
#include "titan/error.hpp"
#include "titan/layers.hpp"
#include "titan/model.hpp"
#include "titan/precision.hpp"
#include "titan/registry.hpp"

namespace {

namespace f8 = titan::float8;
using f8::Format;

// OFP8 v1.0, table 1: e4m3 has bias 7, no infinities, S.1111.111 = NaN;
// e5m2 has bias 15 and IEEE-754 conventions (S.11111.00 = inf, other
// S.11111.xx = NaN). Subnormals (E = 0): (-1)^S 2^(1 - bias) 0.M.
double spec_value(int code, Format format) {
  const bool e4m3 = format == Format::e4m3fn;
  const int mantissa_bits = e4m3 ? 3 : 2, exponent_bits = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
  const int s = code >> 7, e = (code >> mantissa_bits) & ((1 << exponent_bits) - 1),
            m = code & ((1 << mantissa_bits) - 1);
  const double sign = s ? -1.0 : 1.0;
  if (e4m3 && e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity()
                                      : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::pow(2.0, 1 - bias) * (m / std::pow(2.0, mantissa_bits));
  return sign * std::pow(2.0, e - bias) * (1.0 + m / std::pow(2.0, mantissa_bits));
}

struct Case {
  float value;
  int code;
};

void check_encodes(Format format, bool saturate, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    INFO(f8::name(format) << (saturate ? " saturating" : " plain") << ": " << c.value << " (" << std::hexfloat
                          << c.value << std::defaultfloat << ")");
    CHECK(static_cast<int>(f8::encode(c.value, format, saturate)) == c.code);
  }
}

// max |a - b| / max |b|: the error of a matmul result relative to its size.
double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  at::Tensor a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  return (a - e).abs().max().item<double>() / e.abs().max().item<double>();
}

// --- the reference: torchao's casts written out in float64 -----------------

// max_fp8 / max(amax, 1e-12) in float64, rounded to float32, optionally
// floored to a power of two (torchao's amax_to_scale).
double ref_scale(double amax, Format format, bool power_of_2) {
  double max = format == Format::e4m3fn ? 448.0 : 57344.0;
  double scale = static_cast<float>(max / std::max(amax, 1e-12));
  if (power_of_2) scale = std::pow(2.0, std::floor(std::log2(scale)));
  return scale;
}

// x [R, C] (float64) cast to `format`: tensorwise, or with one scale per
// row (axis 1: amax along the row) or per column (axis 0). Returns the
// code values and the scales broadcast to x's shape.
struct RefCast {
  at::Tensor values;  // decoded code values, float64
  at::Tensor scale;   // float64, x's shape
};

RefCast ref_cast(const at::Tensor& x, Format format, bool tensorwise, int axis, bool power_of_2) {
  at::Tensor xd = x.to(at::kDouble).contiguous();
  const int64_t rows = xd.size(0), cols = xd.size(1);
  at::Tensor scale = at::empty_like(xd);
  auto xa = xd.accessor<double, 2>();
  auto sa = scale.accessor<double, 2>();
  double whole = xd.abs().max().item<double>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double amax = whole;
      if (!tensorwise) {
        amax = 0;
        if (axis == 1) {
          for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::abs(xa[r][k]));
        } else {
          for (int64_t k = 0; k < rows; ++k) amax = std::max(amax, std::abs(xa[k][c]));
        }
      }
      sa[r][c] = ref_scale(amax, format, power_of_2);
    }
  }
  at::Tensor values = at::empty_like(xd);
  auto va = values.accessor<double, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      // torchao: (x in float32) * scale (float32), clamped to +-max, cast.
      float scaled = static_cast<float>(xa[r][c]) * static_cast<float>(sa[r][c]);
      va[r][c] = f8::decode(f8::encode(scaled, format, true), format);
    }
  }
  return {values, scale};
}

// a [M, K] @ b [K, N] with both operands cast along K (the contraction dim),
// each product rescaled: sum_k (qa / sa)(qb / sb), in float64.
at::Tensor ref_matmul(const RefCast& a, const RefCast& b) { return at::mm(a.values / a.scale, b.values / b.scale); }

struct RefGrads {
  at::Tensor out, grad_x, grad_w;
};

RefGrads reference_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& g, const std::string& recipe) {
  const Format e4m3 = Format::e4m3fn, e5m2 = Format::e5m2;
  RefGrads r;
  if (recipe == "tensorwise") {
    r.out = ref_matmul(ref_cast(x, e4m3, true, 0, false), ref_cast(w.t(), e4m3, true, 0, false));
    r.grad_x = ref_matmul(ref_cast(g, e5m2, true, 0, false), ref_cast(w, e4m3, true, 0, false));
    r.grad_w = ref_matmul(ref_cast(g.t(), e5m2, true, 0, false), ref_cast(x, e4m3, true, 0, false));
  } else if (recipe == "rowwise") {
    // e4m3 everywhere, scales along each matmul's contraction dim, powers of 2.
    r.out = ref_matmul(ref_cast(x, e4m3, false, 1, true), ref_cast(w.t(), e4m3, false, 0, true));
    r.grad_x = ref_matmul(ref_cast(g, e4m3, false, 1, true), ref_cast(w, e4m3, false, 0, true));
    r.grad_w = ref_matmul(ref_cast(g.t(), e4m3, false, 1, true), ref_cast(x, e4m3, false, 0, true));
  } else {
    // rowwise_with_gw_hp: weight tensorwise for grad_input, grad_weight unquantized.
    r.out = ref_matmul(ref_cast(x, e4m3, false, 1, false), ref_cast(w.t(), e4m3, false, 0, false));
    r.grad_x = ref_matmul(ref_cast(g, e4m3, false, 1, false), ref_cast(w, e4m3, true, 0, false));
    r.grad_w = at::mm(g.t().to(at::kDouble), x.to(at::kDouble));
  }
  return r;
}

std::unique_ptr<titan::PrecisionPolicy> float8_policy(const std::string& yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse(yaml.empty() ? "{}" : yaml, "run.yaml");
  return titan::PluginRegistry::instance().create_precision("float8", context);
}

std::string float8_error_of(const std::string& yaml) {
  try {
    float8_policy(yaml);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

std::shared_ptr<titan::CausalLM> meta_llama3(const std::string& options) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options, "run.yaml").child("model");
  auto spec = titan::PluginRegistry::instance().create_model("llama3", context);
  spec->set_vocab_size(512);
  return spec->build(c10::Device(c10::kMeta));
}

}  // namespace

TEST_CASE("float8 codec: all 256 codes of e4m3fn and e5m2 decode to the OCP FP8 values") {
  for (Format format : {Format::e4m3fn, Format::e5m2}) {
    int nans = 0, infinities = 0;
    for (int code = 0; code < 256; ++code) {
      INFO(f8::name(format) << " code 0x" << std::hex << code);
      double expected = spec_value(code, format);
      double actual = f8::decode(static_cast<uint8_t>(code), format);
      if (std::isnan(expected)) {
        ++nans;
        CHECK(std::isnan(actual));
      } else {
        if (std::isinf(expected)) ++infinities;
        CHECK(actual == expected);
        CHECK(std::signbit(actual) == std::signbit(expected));  // -0 is 0x80
      }
    }
    // e4m3fn: only S.1111.111 is NaN; e5m2: S.11111.{01,10,11}.
    CHECK(nans == (format == Format::e4m3fn ? 2 : 6));
    CHECK(infinities == (format == Format::e4m3fn ? 0 : 2));
  }
  // Landmarks, by hand from the spec.
  CHECK(f8::decode(0x01, Format::e4m3fn) == std::ldexp(1.0f, -9));   // smallest subnormal
  CHECK(f8::decode(0x07, Format::e4m3fn) == 7 * std::ldexp(1.0f, -9));
  CHECK(f8::decode(0x08, Format::e4m3fn) == std::ldexp(1.0f, -6));   // smallest normal
  CHECK(f8::decode(0x38, Format::e4m3fn) == 1.0f);
  CHECK(f8::decode(0x77, Format::e4m3fn) == 240.0f);
  CHECK(f8::decode(0x7E, Format::e4m3fn) == 448.0f);                 // max
  CHECK(f8::decode(0xFE, Format::e4m3fn) == -448.0f);
  CHECK(std::isnan(f8::decode(0x7F, Format::e4m3fn)));
  CHECK(std::isnan(f8::decode(0xFF, Format::e4m3fn)));
  CHECK(f8::decode(0x01, Format::e5m2) == std::ldexp(1.0f, -16));
  CHECK(f8::decode(0x04, Format::e5m2) == std::ldexp(1.0f, -14));
  CHECK(f8::decode(0x3C, Format::e5m2) == 1.0f);
  CHECK(f8::decode(0x7B, Format::e5m2) == 57344.0f);
  CHECK(f8::decode(0x7C, Format::e5m2) == std::numeric_limits<float>::infinity());
  CHECK(f8::decode(0xFC, Format::e5m2) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f8::decode(0x7D, Format::e5m2)));
  CHECK(f8::info(Format::e4m3fn).max == 448.0f);
  CHECK(f8::info(Format::e5m2).max == 57344.0f);
}

TEST_CASE("float8 codec: LibTorch's native float8 casts give the written-out encoder's codes, value for value") {
  // Every bfloat16 value (every exponent, NaNs and infinities included),
  // every midpoint between two neighbouring codes' values (ties), and
  // random float32 values across both formats' ranges.
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    uint32_t word = bits << 16;
    float value;
    std::memcpy(&value, &word, sizeof value);
    values.push_back(value);
  }
  for (Format format : {Format::e4m3fn, Format::e5m2}) {
    for (int code = 0; code < 127; ++code) {
      const float low = f8::decode(static_cast<uint8_t>(code), format);
      const float high = f8::decode(static_cast<uint8_t>(code + 1), format);
      if (std::isfinite(low) && std::isfinite(high)) {
        values.push_back((low + high) / 2);
        values.push_back(-(low + high) / 2);
      }
    }
  }
  at::Tensor input = at::cat({at::tensor(values), at::randn({200000}) * 3000, at::randn({100000}) * 1e-3});
  for (Format format : {Format::e4m3fn, Format::e5m2}) {
    for (bool saturate : {true, false}) {
      const std::string what = std::string(f8::name(format)) + (saturate ? " saturating" : " overflowing");
      INFO(what);
      at::Tensor native = f8::encode(input, format, saturate);
      at::Tensor exact = f8::encode_exactly(input, format, saturate);
      at::Tensor differ = native.ne(exact);
      const int64_t mismatches = differ.sum().item<int64_t>();
      if (mismatches > 0) {
        const int64_t first = differ.nonzero()[0][0].item<int64_t>();
        const std::string mismatch = "first mismatch at " + std::to_string(input[first].item<float>()) +
                                     ": native " + std::to_string(native[first].item<uint8_t>()) + ", exact " +
                                     std::to_string(exact[first].item<uint8_t>());
        INFO(mismatch);
        CHECK(mismatches == 0);
      }
      CHECK((native.scalar_type() == at::kByte));
      // decode() (native) is the exact table, code for code.
      at::Tensor codes = at::arange(256, at::kInt).to(at::kByte);
      at::Tensor decoded = f8::decode(codes, format);
      for (int code = 0; code < 256; ++code) {
        const float expected = f8::decode(static_cast<uint8_t>(code), format);
        const float actual = decoded[code].item<float>();
        CHECK((std::isnan(expected) ? std::isnan(actual) : actual == expected));
      }
    }
  }
}

TEST_CASE("float8 codec: encoding rounds to nearest even, keeps subnormals, saturates or overflows, maps NaN") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float sub4 = std::ldexp(1.0f, -9);   // e4m3 smallest subnormal
  const float sub5 = std::ldexp(1.0f, -16);  // e5m2 smallest subnormal
  // Every non-NaN code is its own value's encoding (both signs, both modes).
  for (Format format : {Format::e4m3fn, Format::e5m2}) {
    for (int code = 0; code < 256; ++code) {
      float value = f8::decode(static_cast<uint8_t>(code), format);
      if (std::isnan(value) || std::isinf(value)) continue;
      INFO(f8::name(format) << " code 0x" << std::hex << code);
      CHECK(f8::encode(value, format, true) == code);
      CHECK(f8::encode(value, format, false) == code);
    }
  }
  check_encodes(Format::e4m3fn, true, {
      {0.0f, 0x00}, {-0.0f, 0x80}, {1.0f, 0x38}, {-2.0f, 0xC0},
      {1.0625f, 0x38},                            // tie between 1 (m=000) and 1.125 (m=001): even
      {1.0625f + std::ldexp(1.0f, -20), 0x39},    // just above the tie: up
      {1.1875f, 0x3A},                            // tie between 1.125 (001) and 1.25 (010): even, up
      {424.0f, 0x7D}, {432.0f, 0x7E},             // 432: tie between 416 (101) and 448 (110)
      {440.0f, 0x7E}, {448.0f, 0x7E}, {464.0f, 0x7E},
      {1.0e6f, 0x7E}, {-1.0e6f, 0xFE}, {inf, 0x7E}, {-inf, 0xFE},    // saturated
      {sub4, 0x01}, {sub4 / 2, 0x00},             // half the smallest subnormal: tie to 0 (even)
      {sub4 / 2 + std::ldexp(1.0f, -30), 0x01},   // just above it
      {1.5f * sub4, 0x02}, {2.5f * sub4, 0x02},   // ties between subnormals: even
      {7.5f * sub4, 0x08},                        // tie between the largest subnormal and 2^-6: even (0x08)
      {std::ldexp(1.0f, -6), 0x08}, {std::ldexp(1.0f, -30), 0x00}, {-std::ldexp(1.0f, -30), 0x80},
      {nan, 0x7F}, {-nan, 0xFF}});
  check_encodes(Format::e4m3fn, false, {
      {448.0f, 0x7E}, {464.0f, 0x7E},             // 464 ties to 448 (even), still finite
      {470.0f, 0x7F}, {1.0e6f, 0x7F}, {inf, 0x7F}, {-inf, 0xFF}});  // no infinity: NaN
  check_encodes(Format::e5m2, true, {
      {1.0f, 0x3C}, {1.125f, 0x3C}, {1.375f, 0x3E}, {-1.375f, 0xBE},  // ties to even
      {57344.0f, 0x7B}, {60000.0f, 0x7B}, {61440.0f, 0x7B}, {1.0e6f, 0x7B}, {inf, 0x7B}, {-inf, 0xFB},
      {sub5, 0x01}, {sub5 / 2, 0x00}, {1.5f * sub5, 0x02}, {3.5f * sub5, 0x04},
      {std::ldexp(1.0f, -14), 0x04}, {nan, 0x7F}});
  check_encodes(Format::e5m2, false, {
      {57344.0f, 0x7B}, {60000.0f, 0x7B},
      {61440.0f, 0x7C},                           // tie between 57344 and 2^16: even = overflow = inf
      {1.0e6f, 0x7C}, {inf, 0x7C}, {-inf, 0xFC}});
  // The tensor form is the scalar one, elementwise.
  at::Tensor values = at::tensor({1.0625f, -470.0f, 3.0f * sub4, nan});
  at::Tensor codes = f8::encode(values, Format::e4m3fn, true);
  CHECK((codes.scalar_type() == at::kByte));
  CHECK(codes[0].item<int>() == 0x38);
  CHECK(codes[1].item<int>() == 0xFE);
  CHECK(codes[2].item<int>() == 0x03);
  CHECK(codes[3].item<int>() == 0x7F);
  CHECK(f8::decode(codes, Format::e4m3fn)[1].item<float>() == -448.0f);
}

TEST_CASE("float8 scales: amax per tensor or per row, max / amax in float32, powers of two, all-zero tensors") {
  at::Tensor x = at::tensor({1.0f, -3.5f, 0.25f, 0.5f, 0.0f, 0.0f}).reshape({3, 2});
  at::Tensor whole = f8::amax_to_scale(f8::amax_of(x, f8::Granularity::tensorwise, 0), Format::e4m3fn, false);
  CHECK(whole.dim() == 0);
  CHECK(whole.item<float>() == 128.0f);  // 448 / 3.5
  at::Tensor rows = f8::amax_to_scale(f8::amax_of(x, f8::Granularity::axiswise, 1), Format::e4m3fn, false);
  REQUIRE(rows.sizes() == at::IntArrayRef({3, 1}));
  CHECK(rows[0][0].item<float>() == 128.0f);
  CHECK(rows[1][0].item<float>() == 896.0f);                      // 448 / 0.5
  CHECK(rows[2][0].item<float>() == static_cast<float>(448e12));  // amax clamped to 1e-12
  at::Tensor columns = f8::amax_to_scale(f8::amax_of(x, f8::Granularity::axiswise, 0), Format::e5m2, true);
  REQUIRE(columns.sizes() == at::IntArrayRef({1, 2}));
  CHECK(columns[0][0].item<float>() == 32768.0f);  // 57344 / 1 = 57344 -> 2^15
  CHECK(columns[0][1].item<float>() == 16384.0f);  // 57344 / 3.5 = 16384 exactly
  at::Tensor third = f8::amax_to_scale(at::tensor(3.0f), Format::e4m3fn, true);
  CHECK(third.item<float>() == 128.0f);  // 149.33 floored to 2^7
  // The scaled maximum lands on the format's max.
  auto q = f8::quantize(x, {false, Format::e4m3fn, f8::Granularity::tensorwise}, 0, false);
  CHECK(q.codes[0][1].item<int>() == 0xFE);  // -3.5 * 128 = -448
  CHECK(f8::dequantize(q)[0][1].item<float>() == -3.5f);
}

TEST_CASE("float8 linear: forward and backward equal a float64 reference of the recipe within 1e-6, every recipe") {
  at::manual_seed(3);
  // x [3, 8, 32] -> 24 rows; weight [48, 32]; rows of very different size
  // so that per-row scales matter.
  at::Tensor x = at::randn({3, 8, 32}) * at::linspace(0.01, 4.0, 32);
  at::Tensor w = at::randn({48, 32}) * 0.2;
  at::Tensor g = at::randn({3, 8, 48}) * at::linspace(1e-3, 2.0, 48);
  for (const std::string recipe_name : {"tensorwise", "rowwise", "rowwise_with_gw_hp"}) {
    INFO(recipe_name);
    f8::Recipe recipe = f8::recipe_from_name(recipe_name);
    at::Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
    at::Tensor out = f8::float8_linear(xi, wi, recipe);
    out.backward(g);
    RefGrads ref = reference_linear(x.reshape({-1, 32}), w, g.reshape({-1, 48}), recipe_name);
    double e_out = relative_error(out.reshape({-1, 48}), ref.out);
    double e_gx = relative_error(xi.grad().reshape({-1, 32}), ref.grad_x);
    double e_gw = relative_error(wi.grad(), ref.grad_w);
    MESSAGE(recipe_name << ": max relative error vs float64 reference: output " << e_out << ", grad_input " << e_gx
                        << ", grad_weight " << e_gw);
    CHECK(out.sizes() == at::IntArrayRef({3, 8, 48}));
    CHECK(e_out <= 1e-6);
    CHECK(e_gx <= 1e-6);
    CHECK(e_gw <= 1e-6);
    // And it is float8, not the float32 matmul: the quantization error shows.
    CHECK(relative_error(out.reshape({-1, 48}), at::mm(x.reshape({-1, 32}), w.t())) > 1e-4);
  }
}

TEST_CASE("float8 experts: each expert's three products are the float8 linear's (rowwise), and the gradients reach "
          "the experts that got rows") {
  at::manual_seed(4);
  const int64_t experts = 3, dim = 32, hidden = 48;
  at::Tensor w1 = (at::randn({experts, hidden, dim}) * 0.2).requires_grad_(true);
  at::Tensor w2 = (at::randn({experts, dim, hidden}) * 0.2).requires_grad_(true);
  at::Tensor w3 = (at::randn({experts, hidden, dim}) * 0.2).requires_grad_(true);
  const at::Tensor tokens = at::randn({10, dim}) * at::linspace(0.01, 4.0, dim);
  const std::vector<int64_t> counts{4, 0, 6};
  const f8::Recipe recipe = f8::recipe_from_name("rowwise");
  const titan::ExpertMatmul float8 = [&](const at::Tensor& x, const at::Tensor& w) {
    return f8::float8_linear(x, w, recipe);
  };
  at::Tensor out = titan::run_experts_loop(w1, w2, w3, tokens, counts, float8);
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> rows;
    int64_t start = 0;
    for (int64_t e = 0; e < experts; ++e) {
      if (counts[e] == 0) continue;
      const at::Tensor x = tokens.narrow(0, start, counts[e]);
      at::Tensor h = at::silu(f8::float8_linear(x, w1[e], recipe)) * f8::float8_linear(x, w3[e], recipe);
      rows.push_back(f8::float8_linear(h, w2[e], recipe));
      start += counts[e];
    }
    expected = at::cat(rows, 0);
  }
  CHECK((out - expected).abs().max().item<double>() == 0.0);
  // Float8, not the float32 experts: the quantization error shows.
  CHECK(relative_error(out.detach(), titan::run_experts_loop(w1, w2, w3, tokens, counts).detach()) > 1e-4);
  out.pow(2).sum().backward();
  for (const at::Tensor& w : {w1, w2, w3}) {
    REQUIRE(w.grad().defined());
    CHECK(w.grad()[0].abs().sum().item<double>() > 0);
    CHECK(w.grad()[1].abs().sum().item<double>() == 0);  // no rows, zero gradient
    CHECK(w.grad()[2].abs().sum().item<double>() > 0);
  }
}

TEST_CASE("float8 grouped experts (emulated): one call per product equals the loop of float8 linears, output and "
          "every gradient, with groups padded to 16 rows and an expert without rows") {
  at::manual_seed(5);
  const int64_t experts = 3, dim = 32, hidden = 48;
  auto weights = [&](int64_t out, int64_t in) { return (at::randn({experts, out, in}) * 0.2).requires_grad_(true); };
  at::Tensor w1 = weights(hidden, dim), w2 = weights(dim, hidden), w3 = weights(hidden, dim);
  // Columns three orders of magnitude apart, and the first expert's rows
  // 1e4 times smaller than the last's: cast with the whole batch's column
  // scales instead of its own (grad_weight's), they would fall below
  // e4m3's normal range.
  const at::Tensor row_size = at::cat({at::full({5, 1}, 1e-4), at::ones({16, 1})});
  at::Tensor tokens = (at::randn({21, dim}) * at::logspace(-2, 1, dim) * row_size).requires_grad_(true);
  const std::vector<int64_t> counts{5, 0, 16};
  const f8::Recipe recipe = f8::recipe_from_name("rowwise");
  const titan::ExpertMatmul per_expert = [&](const at::Tensor& x, const at::Tensor& w) {
    return f8::float8_linear(x, w, recipe);
  };
  const titan::ExpertGroupedMatmul grouped = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& ends,
                                                 const std::vector<int64_t>& rows) {
    CHECK(rows == std::vector<int64_t>{16, 0, 16});  // padded to the alignment
    return f8::float8_grouped_linear(x, w, ends, rows, recipe, /*emulate=*/true);
  };
  auto run = [&](bool one_call) {
    for (at::Tensor* t : {&w1, &w2, &w3, &tokens}) t->mutable_grad() = at::Tensor();
    at::Tensor out = one_call ? titan::run_experts_grouped_mm(w1, w2, w3, tokens, counts, 16, grouped)
                              : titan::run_experts_loop(w1, w2, w3, tokens, counts, per_expert);
    out.pow(2).sum().backward();
    return std::vector<at::Tensor>{out.detach(), tokens.grad(), w1.grad(), w2.grad(), w3.grad()};
  };
  const std::vector<at::Tensor> loop = run(false), one_call = run(true);
  const std::string names[] = {"output", "grad tokens", "grad w1", "grad w2", "grad w3"};
  for (size_t i = 0; i < loop.size(); ++i) {
    REQUIRE(one_call[i].defined());
    // A weight's gradient expert by expert: each is the size of its own rows.
    const double error = i < 2 ? relative_error(one_call[i], loop[i])
                               : std::max(relative_error(one_call[i][0], loop[i][0]),
                                          relative_error(one_call[i][2], loop[i][2]));
    MESSAGE(names[i] << ": grouped vs loop, max relative error " << error);
    CHECK(error <= 1e-6);
  }
  for (size_t i = 2; i < loop.size(); ++i) CHECK(one_call[i][1].abs().sum().item<double>() == 0);  // no rows
  // Float8, not float32: the quantization error shows against the plain grouped GEMM.
  CHECK(relative_error(one_call[0], titan::run_experts_grouped_mm(w1, w2, w3, tokens, counts, 16).detach()) > 1e-4);
  // Only rowwise casts every operand as the kernel takes them.
  CHECK_THROWS_WITH_AS(f8::float8_grouped_linear(tokens, w1, at::zeros({3}, at::kInt), {5, 0, 16},
                                                 f8::recipe_from_name("tensorwise"), true),
                       doctest::Contains("float8 experts take recipe_name: rowwise"), titan::Error);
}

TEST_CASE("float8 linear: a weight cast before the call (FSDP's float8 all-gather) gives exactly the same result") {
  at::manual_seed(4);
  at::Tensor x = at::randn({16, 32}), w = at::randn({48, 32}), g = at::randn({16, 48});
  f8::Recipe recipe = f8::recipe_from_name("tensorwise");
  at::Tensor w1 = w.clone().requires_grad_(true), w2 = w.clone().requires_grad_(true);
  at::Tensor plain = f8::float8_linear(x, w1, recipe);
  f8::Quantized cast = f8::quantize(w, recipe.weight, 1, false);
  // The parameter holds other values (what FSDP rebuilt); the codes decide.
  at::Tensor gathered = f8::float8_linear(x, w2, recipe, cast);
  CHECK(at::equal(plain, gathered));
  plain.backward(g);
  gathered.backward(g);
  CHECK(at::equal(w1.grad(), w2.grad()));
}

TEST_CASE("float8 linear: a biased Linear (GPT-OSS's) keeps its bias in high precision, and the bias trains") {
  at::manual_seed(5);
  auto linear = std::make_shared<titan::Linear>(32, 48, at::TensorOptions(), /*bias=*/true);
  {
    at::NoGradGuard no_grad;
    linear->weight.normal_();
    linear->bias.normal_();
  }
  auto settings = std::make_shared<f8::Float8Settings>();
  settings->recipe = f8::recipe_from_name("rowwise");
  f8::Float8Linear float8(linear, settings, "wq");
  CHECK(float8.named_parameters(/*recurse=*/false).contains("bias"));
  at::Tensor x = at::randn({16, 32});
  at::Tensor out = float8.forward(x);
  CHECK(at::equal(out, f8::float8_linear(x, linear->weight, settings->recipe) + linear->bias));
  out.sum().backward();
  CHECK(at::allclose(linear->bias.grad(), at::full({48}, 16.0)));
}

TEST_CASE("float8 plugin: converts the model's linears by path, keeps filter_fqns and dims not divisible by 16, "
          "keeps parameter names") {
  auto model = meta_llama3("  dim: 64\n  n_layers: 2\n  n_heads: 4\n");
  std::vector<std::string> before;
  for (const auto& item : model->named_parameters()) before.push_back(item.key());
  float8_policy("recipe_name: rowwise")->convert(*model);
  std::vector<std::string> after;
  for (const auto& item : model->named_parameters()) after.push_back(item.key());
  CHECK(before == after);
  int converted = 0;
  for (const auto& item : model->named_modules("", false)) {
    if (dynamic_cast<f8::Float8Linear*>(item.value().get())) ++converted;
  }
  CHECK(converted == 2 * 7);  // wq wk wv wo w1 w2 w3 per block; not `output`
  CHECK(dynamic_cast<f8::Float8Linear*>(model->named_modules()["output"].get()) == nullptr);
  // Nothing filtered: the head converts too.
  auto all = meta_llama3("  dim: 64\n  n_layers: 1\n  n_heads: 4\n");
  float8_policy("filter_fqns: []")->convert(*all);
  CHECK(dynamic_cast<f8::Float8Linear*>(all->named_modules()["output"].get()) != nullptr);
  // dim 72: every attention projection has a dim not divisible by 16.
  auto odd = meta_llama3("  dim: 72\n  n_layers: 1\n  n_heads: 4\n");
  float8_policy("")->convert(*odd);
  CHECK(dynamic_cast<f8::Float8Linear*>(odd->named_modules()["layers.0.attention.wq"].get()) == nullptr);
  // auto_filter_small_kn: the debug sizes are all below torchao's thresholds.
  auto small = meta_llama3("  dim: 64\n  n_layers: 1\n  n_heads: 4\n");
  float8_policy("auto_filter_small_kn: true")->convert(*small);
  for (const auto& item : small->named_modules("", false)) CHECK(dynamic_cast<f8::Float8Linear*>(item.value().get()) == nullptr);
}

TEST_CASE("float8 plugin: unknown recipes and impossible option mixes are refused naming the key, value and choices") {
  std::string recipe = float8_error_of("recipe_name: blockwise");
  CHECK(recipe.find("recipe_name") != std::string::npos);
  CHECK(recipe.find("blockwise") != std::string::npos);
  CHECK(recipe.find("rowwise_with_gw_hp") != std::string::npos);
  std::string gather = float8_error_of("recipe_name: rowwise\nenable_fsdp_float8_all_gather: true");
  CHECK(gather.find("enable_fsdp_float8_all_gather") != std::string::npos);
  CHECK(gather.find("tensorwise") != std::string::npos);
  std::string precompute = float8_error_of("precompute_float8_dynamic_scale_for_fsdp: true");
  CHECK(precompute.find("set enable_fsdp_float8_all_gather: true") != std::string::npos);
  CHECK(float8_error_of("recipe_name: tensorwise\nenable_fsdp_float8_all_gather: true\n"
                 "precompute_float8_dynamic_scale_for_fsdp: true").empty());
  CHECK_THROWS_AS(f8::recipe_from_name("delayed"), titan::Error);
}
