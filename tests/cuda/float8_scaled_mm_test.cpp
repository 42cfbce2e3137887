// Float8 on the GPU against the exact emulation: float8::scaled_mm
// (`_scaled_mm`) on codes made by the float8 plugin's codec equals a float32
// matmul of their dequantized values, tensorwise and rowwise; the float8
// linear on `_scaled_mm` (emulate: false) equals its emulation on the same
// CUDA tensors, forward and backward, for every recipe; so do the float8
// experts' grouped products (`_scaled_grouped_mm`, or `_scaled_mm` per expert).
// Every case is skipped without a CUDA device of compute capability 8.9 or newer.
#include "cuda_skip.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "float8_codec.h"
#include "float8_grouped_mm.h"
#include "float8_linear.h"
#include "float8_scaled_mm.h"
#include "float8_scaling.h"
#include "titan/error.hpp"

// `_scaled_mm` needs sm_89+: an older GPU says so and stops the case.
#define TITAN_REQUIRE_SCALED_MM(needs)                                                                \
  do {                                                                                                \
    TITAN_REQUIRE_CUDA(needs);                                                                        \
    if (!titan::float8::scaled_mm_available()) {                                                      \
      MESSAGE("TITAN_SKIPPED: the CUDA device is older than compute capability 8.9, which _scaled_mm " \
              "needs ("                                                                               \
              << (needs) << ")");                                                                     \
      return;                                                                                         \
    }                                                                                                 \
  } while (false)

namespace {

namespace f8 = titan::float8;
using f8::Format;
using f8::Granularity;

// max |actual - expected| / max |expected|: a matmul's error relative to its size.
double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  at::Tensor a = actual.detach().cpu().to(at::kDouble), e = expected.detach().cpu().to(at::kDouble);
  return (a - e).abs().max().item<double>() / e.abs().max().item<double>();
}

// [rows, k] values whose rows differ in size by three orders of magnitude,
// so that rowwise scales differ from row to row. Drawn on the CPU.
at::Tensor operand_values(int64_t rows, int64_t k, uint64_t seed) {
  at::manual_seed(seed);
  return at::randn({rows, k}) * at::logspace(-2, 1, rows).unsqueeze(1);
}

struct Operand {
  f8::Format format;
  Granularity granularity;  // axiswise: one scale per row (over K)
};

const char* granularity_name(Granularity granularity) {
  return granularity == Granularity::tensorwise ? "tensorwise" : "rowwise";
}

// The scales as float8::scaled_mm documents them: 0-dim, or [rows, 1].
std::vector<int64_t> scale_shape(Granularity granularity, int64_t rows) {
  return granularity == Granularity::tensorwise ? std::vector<int64_t>{} : std::vector<int64_t>{rows, 1};
}

// a [M, K] @ b [N, K]^T by float8::scaled_mm on codes the plugin's codec made
// (on the CPU) against at::mm of their dequantized values in float32.
void check_scaled_mm(int64_t m, int64_t n, int64_t k, Operand a_spec, Operand b_spec, c10::ScalarType out_dtype,
                     double tolerance) {
  // std::string: doctest's INFO prints a const char* as its address.
  INFO("[" << m << ", " << k << "] " << std::string(f8::name(a_spec.format)) << " "
           << std::string(granularity_name(a_spec.granularity)) << " @ [" << n << ", " << k << "]^T "
           << std::string(f8::name(b_spec.format)) << " " << std::string(granularity_name(b_spec.granularity))
           << " -> " << std::string(c10::toString(out_dtype)));
  at::Tensor a = operand_values(m, k, static_cast<uint64_t>(m * 1000 + k));
  at::Tensor b = operand_values(n, k, static_cast<uint64_t>(n * 1000 + k + 1));
  f8::Quantized qa = f8::quantize(a, {false, a_spec.format, a_spec.granularity}, /*reduce_dim=*/1, false);
  f8::Quantized qb = f8::quantize(b, {false, b_spec.format, b_spec.granularity}, /*reduce_dim=*/1, false);
  CHECK(qa.scale.sizes().vec() == scale_shape(a_spec.granularity, m));
  CHECK(qb.scale.sizes().vec() == scale_shape(b_spec.granularity, n));
  at::Tensor expected = at::mm(f8::dequantize(qa), f8::dequantize(qb).t());

  at::Tensor out = titan::float8::scaled_mm(qa.codes.cuda(), qa.format == Format::e5m2, qa.scale.cuda(),
                                            qb.codes.cuda(), qb.format == Format::e5m2, qb.scale.cuda(), out_dtype);
  REQUIRE(out.is_cuda());
  CHECK(std::string(c10::toString(out.scalar_type())) == c10::toString(out_dtype));
  REQUIRE(out.sizes() == at::IntArrayRef({m, n}));
  const double error = relative_error(out, expected);
  INFO("max error / max |expected| = " << error);
  CHECK(error <= tolerance);
}

// bf16 output: the float32 result rounded to bf16 (8 mantissa bits).
constexpr double kBf16Tolerance = 1e-2;
// fp32 output: the same exact products, but Hopper's float8 tensor cores
// keep only about 14 bits of the running sum (DeepSeek-V3 report, 3.3.2),
// so about 2^-13 of the largest partial sum: measured up to 2.3e-4 on an
// H200. A wrong scale or layout is off by O(1).
constexpr double kFp32Tolerance = 1e-3;

struct Shape {
  int64_t m, n, k;
};
// Multiples of 16 (`_scaled_mm` needs K and N so); one with M = 16.
const Shape kShapes[] = {{64, 96, 128}, {16, 96, 128}, {48, 32, 16}};

const Operand e4m3_tensorwise{Format::e4m3fn, Granularity::tensorwise};
const Operand e5m2_tensorwise{Format::e5m2, Granularity::tensorwise};
const Operand e4m3_rowwise{Format::e4m3fn, Granularity::axiswise};

struct LinearRun {
  at::Tensor out, grad_x, grad_w;
};

// x [2, 32, 128] (64 rows: grad_weight contracts over them, so a multiple
// of 16) through a [96, 128] weight, bf16, forward and backward.
LinearRun run_linear(const f8::Recipe& recipe, bool emulate, at::Device device) {
  at::manual_seed(11);
  at::Tensor x = (at::randn({2, 32, 128}) * at::linspace(0.01, 4.0, 128)).to(at::kBFloat16);
  at::Tensor w = (at::randn({96, 128}) * 0.2).to(at::kBFloat16);
  at::Tensor g = (at::randn({2, 32, 96}) * at::linspace(1e-3, 2.0, 96)).to(at::kBFloat16);
  at::Tensor xi = x.to(device).requires_grad_(true), wi = w.to(device).requires_grad_(true);
  at::Tensor out = f8::float8_linear(xi, wi, recipe, f8::Quantized{}, emulate);
  out.backward(g.to(device));
  return {out.detach(), xi.grad(), wi.grad()};
}

void check_linear_run(const LinearRun& actual, const LinearRun& expected, const std::string& what) {
  INFO(what);
  struct Result {
    const char* name;
    at::Tensor actual, expected;
  };
  const Result results[] = {{"output", actual.out, expected.out},
                            {"grad_input", actual.grad_x, expected.grad_x},
                            {"grad_weight", actual.grad_w, expected.grad_w}};
  for (const Result& result : results) {
    INFO(result.name);
    REQUIRE(result.actual.defined());
    CHECK(std::string(c10::toString(result.actual.scalar_type())) == "BFloat16");
    REQUIRE(result.actual.sizes() == result.expected.sizes());
    const double error = relative_error(result.actual, result.expected);
    INFO("max error / max |expected| = " << error);
    CHECK(error <= kBf16Tolerance);
  }
}

// The float8 linear by `_scaled_mm` (emulate: false) against its emulation
// on the same CUDA tensors (the same casts, the matmuls in float32), and
// that emulation against the CPU's (the casts made on the GPU are the CPU's).
void check_linear_on_gpu(const std::string& recipe_name) {
  const f8::Recipe recipe = f8::recipe_from_name(recipe_name);
  LinearRun emulated_on_cpu = run_linear(recipe, /*emulate=*/true, at::kCPU);
  LinearRun emulated = run_linear(recipe, /*emulate=*/true, at::kCUDA);
  LinearRun scaled_mm = run_linear(recipe, /*emulate=*/false, at::kCUDA);
  REQUIRE(emulated.out.is_cuda());
  REQUIRE(scaled_mm.out.is_cuda());
  REQUIRE(scaled_mm.grad_x.is_cuda());
  REQUIRE(scaled_mm.grad_w.is_cuda());
  check_linear_run(emulated, emulated_on_cpu, recipe_name + ": emulation on CUDA vs on the CPU");
  check_linear_run(scaled_mm, emulated, recipe_name + ": _scaled_mm vs emulation, both on CUDA");
}

}  // namespace

TEST_CASE("float8 CUDA: scaled_mm with tensorwise scales equals the float32 matmul of the dequantized codes") {
  TITAN_REQUIRE_SCALED_MM("to run _scaled_mm with tensorwise scales");
  for (const Shape& s : kShapes) {
    check_scaled_mm(s.m, s.n, s.k, e4m3_tensorwise, e4m3_tensorwise, at::kBFloat16, kBf16Tolerance);
    check_scaled_mm(s.m, s.n, s.k, e4m3_tensorwise, e4m3_tensorwise, at::kFloat, kFp32Tolerance);
    // The tensorwise recipe's gradient matmuls: e5m2 gradients times e4m3.
    check_scaled_mm(s.m, s.n, s.k, e5m2_tensorwise, e4m3_tensorwise, at::kBFloat16, kBf16Tolerance);
    check_scaled_mm(s.m, s.n, s.k, e5m2_tensorwise, e4m3_tensorwise, at::kFloat, kFp32Tolerance);
  }
}

TEST_CASE("float8 CUDA: scaled_mm with rowwise scales ([M, 1] and [N, 1]) equals the float32 matmul of the "
          "dequantized codes") {
  TITAN_REQUIRE_SCALED_MM("to run _scaled_mm with rowwise scales");
  for (const Shape& s : kShapes) {
    check_scaled_mm(s.m, s.n, s.k, e4m3_rowwise, e4m3_rowwise, at::kBFloat16, kBf16Tolerance);
  }
  // Float32 output with rowwise scales: LibTorch versions differ on whether
  // `_scaled_mm` takes it; where it does, the result must be exact.
  const Shape& s = kShapes[0];
  try {
    check_scaled_mm(s.m, s.n, s.k, e4m3_rowwise, e4m3_rowwise, at::kFloat, kFp32Tolerance);
  } catch (const c10::Error& error) {
    MESSAGE("_scaled_mm refuses float32 output with rowwise scales here: " << error.what_without_backtrace());
  }
}

TEST_CASE("float8 CUDA: scaled_mm with a rowwise a and a tensorwise b (rowwise_with_gw_hp's grad_input) equals the "
          "float32 matmul of the dequantized codes") {
  TITAN_REQUIRE_SCALED_MM("to run _scaled_mm on mixed scales");
  for (const Shape& s : kShapes) {
    check_scaled_mm(s.m, s.n, s.k, e4m3_rowwise, e4m3_tensorwise, at::kBFloat16, kBf16Tolerance);
  }
}

TEST_CASE("float8 CUDA: scaled_mm says what it needs when the operands do not fit") {
  TITAN_REQUIRE_SCALED_MM("to call scaled_mm with CUDA operands");
  at::Tensor codes = at::zeros({16, 32}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  at::Tensor other = at::zeros({16, 48}, codes.options());
  at::Tensor scale = at::ones({}, at::TensorOptions().device(at::kCUDA));
  CHECK_THROWS_WITH_AS(titan::float8::scaled_mm(codes, false, scale, other, false, scale, at::kBFloat16),
                       doctest::Contains("expected a [M, K] and b [N, K]"), titan::Error);
}

TEST_CASE("float8 CUDA: the tensorwise float8 linear on _scaled_mm equals its emulation, forward and backward") {
  TITAN_REQUIRE_SCALED_MM("to run the float8 linear's matmuls on _scaled_mm");
  check_linear_on_gpu("tensorwise");
}

TEST_CASE("float8 CUDA: the rowwise float8 linear on _scaled_mm equals its emulation, forward and backward") {
  TITAN_REQUIRE_SCALED_MM("to run the float8 linear's matmuls on _scaled_mm");
  check_linear_on_gpu("rowwise");
}

TEST_CASE("float8 CUDA: the rowwise_with_gw_hp float8 linear on _scaled_mm equals its emulation, forward and "
          "backward") {
  TITAN_REQUIRE_SCALED_MM("to run the float8 linear's matmuls on _scaled_mm");
  check_linear_on_gpu("rowwise_with_gw_hp");
}

TEST_CASE("float8 CUDA: the grouped experts' products on _scaled_grouped_mm (bfloat16) and on _scaled_mm per expert "
          "(float32) equal their emulation on the same CUDA tensors, output and gradients") {
  TITAN_REQUIRE_SCALED_MM("to run the float8 experts' grouped GEMMs");
  const f8::Recipe recipe = f8::recipe_from_name("rowwise");
  const int64_t experts = 4, k = 64, n = 96;
  const std::vector<int64_t> rows{32, 0, 16, 48};  // multiples of 16, one expert without rows
  const at::Tensor ends = at::tensor(std::vector<int32_t>{32, 32, 48, 96}).to(at::kCUDA);
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    const bool grouped = dtype == at::kBFloat16;
    if (grouped && !f8::grouped_scaled_mm_available()) {
      MESSAGE("_scaled_grouped_mm not run: it needs compute capability 9.0 or 10.0");
      continue;
    }
    const auto options = at::TensorOptions().device(at::kCUDA).dtype(dtype);
    at::Tensor x = operand_values(96, k, 31).to(options).requires_grad_(true);
    at::manual_seed(32);
    at::Tensor w = (at::randn({experts, n, k}) * at::logspace(-1, 0.5, k)).to(options).requires_grad_(true);
    const at::Tensor grad_out = operand_values(96, n, 33).to(options);
    auto run = [&](bool emulate) {
      x.mutable_grad() = at::Tensor();
      w.mutable_grad() = at::Tensor();
      at::Tensor out = f8::float8_grouped_linear(x, w, ends, rows, recipe, emulate);
      out.backward(grad_out);
      return std::vector<at::Tensor>{out.detach(), x.grad(), w.grad()};
    };
    std::vector<at::Tensor> gpu;
    try {
      gpu = run(false);
    } catch (const titan::Error& error) {
      REQUIRE_MESSAGE(!grouped, error.what());
      MESSAGE("_scaled_mm refuses float32 output with rowwise scales here: " << error.what());
      continue;
    }
    const std::vector<at::Tensor> emulated = run(true);
    // bfloat16 output: one rounding of a float32 sum taken in another order (an ulp is 2^-8 of the value).
    const double tolerance = grouped ? 1e-2 : kFp32Tolerance;
    const std::string names[] = {"output", "grad x", "grad weights"};
    for (size_t i = 0; i < gpu.size(); ++i) {
      const double error = relative_error(gpu[i], emulated[i]);
      MESSAGE((grouped ? "_scaled_grouped_mm " : "_scaled_mm per expert ") << names[i] << ": relative error " << error);
      CHECK(error <= tolerance);
    }
    CHECK(gpu[2][1].abs().sum().item<double>() == 0);  // the expert without rows
  }
}
