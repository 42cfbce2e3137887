// The fused CUDA kernels, called through their autograd glue and layers
// (plugins/fused_kernels/cuda_layers.h), equal their CPU emulations
// (fused_ops.h, themselves checked against the ATen path in
// tests/plugins/fused_kernels_test.cpp): forward and backward, fp32 tightly
// and bf16 within a last-bit rounding, odd sizes. Every case is skipped
// where there is no CUDA device. They link LibTorch's CUDA libraries, so they
// are a program of their own (titan_cuda_tests; tests/CMakeLists.txt).
#include "cuda_skip.hpp"
#include "tensor_support.hpp"

#include <memory>
#include <string>

#include "fused_ops.h"
#include "titan/error.hpp"
#include "titan/layers.hpp"
#include "cuda_layers.h"

namespace {

namespace fused = titan::fused;

struct Tolerance {
  double rtol, atol;
};
// Elementwise results: the kernel and the emulation round at the same points,
// so fp32 differs by summation order and bf16 at most by a last bit.
Tolerance elementwise(at::ScalarType dtype) {
  return dtype == at::kFloat ? Tolerance{1e-5, 1e-5} : Tolerance{1e-2, 1e-2};
}
// Sums over rows, tokens or the vocabulary (other orders, other GEMMs).
Tolerance reduction(at::ScalarType dtype) {
  return dtype == at::kFloat ? Tolerance{1e-4, 1e-4} : Tolerance{2e-2, 2e-2};
}

// Names the tensor and the worst error when the GPU result differs.
void check_close(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol, const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  CHECK(std::string(c10::toString(actual.scalar_type())) == c10::toString(expected.scalar_type()));
  at::Tensor a = actual.cpu().to(at::kDouble), e = expected.cpu().to(at::kDouble);
  double worst = a.numel() == 0 ? 0.0 : (a - e).abs().max().item<double>();
  INFO("max abs error " << worst);
  CHECK(at::allclose(a, e, tol.rtol, tol.atol));
}

// Drawn on the CPU (same numbers on every machine), then moved.
at::Tensor randn(at::IntArrayRef shape, at::ScalarType dtype, double scale = 1.0) {
  return (at::randn(shape, at::kFloat) * scale).to(dtype);
}
at::Tensor on_gpu(const at::Tensor& t) { return t.to(at::kCUDA); }
at::Tensor gpu_leaf(const at::Tensor& t) { return t.to(at::kCUDA).detach().set_requires_grad(true); }

using titan::test::dtype_name;

void check_rmsnorm(int64_t rows, int64_t dim, at::ScalarType dtype) {
  at::manual_seed(rows * 131 + dim);
  const double eps = 1e-5;
  at::Tensor x = randn({rows, dim}, dtype), weight = randn({dim}, dtype, 0.5).add(1);
  at::Tensor grad_y = randn({rows, dim}, dtype);
  auto expected = fused::emulated_rmsnorm_forward(x, weight, eps);
  auto expected_grads = fused::emulated_rmsnorm_backward(grad_y, x, weight, expected.rstd);

  auto norm = std::make_shared<titan::RMSNorm>(dim, eps, at::TensorOptions().dtype(dtype).device(at::kCUDA));
  {
    at::NoGradGuard no_grad;
    norm->weight.copy_(weight);
  }
  fused::CudaRMSNorm layer(norm);
  at::Tensor x_gpu = gpu_leaf(x);
  // [1, rows, dim]: the layer folds the leading sizes, as it does the model's [batch, seq, dim].
  at::Tensor y = layer.forward(x_gpu.view({1, rows, dim}));
  y.backward(on_gpu(grad_y).view({1, rows, dim}));
  std::string name = std::string("rmsnorm ") + dtype_name(dtype) + " rows " + std::to_string(rows) + " dim " +
                     std::to_string(dim);
  check_close(y.view({rows, dim}), expected.y, elementwise(dtype), name + " y");
  check_close(x_gpu.grad(), expected_grads.grad_x, elementwise(dtype), name + " grad_x");
  check_close(norm->weight.grad(), expected_grads.grad_weight, reduction(dtype), name + " grad_weight");
}

void check_rope(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, at::ScalarType dtype) {
  at::manual_seed(seq * 7 + heads);
  at::Tensor angles = at::outer(at::arange(seq + 3, at::kFloat), at::rand({head_dim / 2}) * 2);
  at::Tensor cos = angles.cos(), sin = angles.sin();  // longer than seq, as the model's tables
  at::Tensor x = randn({batch, seq, heads, head_dim}, dtype);
  // The gradient as attention hands it back: strided, a transpose of [batch, heads, seq, head_dim].
  at::Tensor grad_out = randn({batch, heads, seq, head_dim}, dtype).transpose(1, 2);
  fused::CudaRotary rope;
  at::Tensor x_gpu = gpu_leaf(x);
  at::Tensor out = rope.forward(x_gpu, on_gpu(cos), on_gpu(sin));
  out.backward(on_gpu(grad_out));
  std::string name = std::string("rope ") + dtype_name(dtype) + " [" + std::to_string(batch) + ", " +
                     std::to_string(seq) + ", " + std::to_string(heads) + ", " + std::to_string(head_dim) + "]";
  check_close(out, fused::emulated_rope(x, cos, sin, +1), elementwise(dtype), name + " forward");
  check_close(x_gpu.grad(), fused::emulated_rope(grad_out.contiguous(), cos, sin, -1), elementwise(dtype),
              name + " backward");
}

void check_swiglu(at::IntArrayRef shape, at::ScalarType dtype) {
  at::manual_seed(shape[0]);
  at::Tensor a = randn(shape, dtype, 3), b = randn(shape, dtype), grad_out = randn(shape, dtype);
  auto expected_grads = fused::emulated_swiglu_backward(grad_out, a, b);
  fused::CudaSwiGLU swiglu;
  at::Tensor a_gpu = gpu_leaf(a), b_gpu = gpu_leaf(b);
  at::Tensor out = swiglu.forward(a_gpu, b_gpu);
  out.backward(on_gpu(grad_out));
  std::string name = std::string("swiglu ") + dtype_name(dtype) + " " + c10::str(shape);
  check_close(out, fused::emulated_swiglu_forward(a, b), elementwise(dtype), name + " forward");
  check_close(a_gpu.grad(), expected_grads.grad_a, elementwise(dtype), name + " grad_a");
  check_close(b_gpu.grad(), expected_grads.grad_b, elementwise(dtype), name + " grad_b");
}

void check_cross_entropy(int64_t tokens, int64_t dim, int64_t vocab, int64_t chunk, at::ScalarType dtype,
                         bool with_ignored) {
  at::manual_seed(tokens * 13 + vocab);
  at::Tensor hidden = randn({tokens, dim}, dtype), weight = randn({vocab, dim}, dtype, 0.2);
  at::Tensor labels = at::randint(vocab, {tokens}, at::kLong);
  if (with_ignored && tokens > 1) labels.index_put_({at::arange(0, tokens, 3)}, -100);
  at::Tensor grad_loss = at::full({}, 0.75, at::kFloat);
  auto expected = fused::emulated_chunked_cross_entropy_forward(hidden, weight, labels, chunk);
  auto expected_grads =
      fused::emulated_chunked_cross_entropy_backward(hidden, weight, labels, expected.lse, grad_loss, chunk);

  at::Tensor hidden_gpu = gpu_leaf(hidden), weight_gpu = gpu_leaf(weight);
  titan::LossFn loss_fn = fused::cuda_chunked_linear_cross_entropy(weight_gpu, chunk);
  // The loss slot's shapes: hidden [batch, seq, dim], labels [batch, seq].
  at::Tensor loss = loss_fn(hidden_gpu.view({1, tokens, dim}), on_gpu(labels).view({1, tokens}));
  loss.backward(on_gpu(grad_loss));
  std::string name = std::string("cross_entropy ") + dtype_name(dtype) + " tokens " + std::to_string(tokens) +
                     " vocab " + std::to_string(vocab) + " chunk " + std::to_string(chunk);
  check_close(loss, expected.loss, reduction(dtype), name + " loss");
  check_close(hidden_gpu.grad(), expected_grads.grad_hidden, reduction(dtype), name + " grad_hidden");
  check_close(weight_gpu.grad(), expected_grads.grad_weight, reduction(dtype), name + " grad_weight");
}

}  // namespace

TEST_CASE("fused_kernels CUDA: RMSNorm kernel equals its emulation forward and backward") {
  TITAN_REQUIRE_CUDA("to run the RMSNorm kernel");
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_rmsnorm(64, 96, dtype);
    check_rmsnorm(1, 33, dtype);      // one row, odd width
    check_rmsnorm(1100, 40, dtype);   // more rows than the kernel's 512 row groups
    check_rmsnorm(3, 1000, dtype);    // rows wider than a block of 256 threads
  }
}

TEST_CASE("fused_kernels CUDA: RoPE kernel equals its emulation forward and backward (interleaved pairs)") {
  TITAN_REQUIRE_CUDA("to run the rotary embedding kernel");
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_rope(2, 17, 3, 16, dtype);
    check_rope(1, 1, 1, 2, dtype);
  }
  check_rope(8, 2049, 17, 128, at::kFloat);  // more pairs than one grid: the grid-stride loop
}

TEST_CASE("fused_kernels CUDA: SwiGLU kernel equals its emulation forward and backward") {
  TITAN_REQUIRE_CUDA("to run the SwiGLU kernel");
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_swiglu({37, 53}, dtype);
    check_swiglu({1}, dtype);
  }
  check_swiglu({4099, 4099}, at::kFloat);  // more elements than one grid: the grid-stride loop
}

TEST_CASE("fused_kernels CUDA: chunked cross-entropy kernel equals its emulation forward and backward") {
  TITAN_REQUIRE_CUDA("to run the chunked cross-entropy kernel and its cuBLAS GEMMs");
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_cross_entropy(24, 32, 1000, 128, dtype, false);   // vocab not a multiple of the chunk
    check_cross_entropy(1, 16, 77, 32, dtype, false);       // one token
    check_cross_entropy(30, 16, 300, 300, dtype, true);     // one chunk, ignored labels
    check_cross_entropy(9, 8, 50, 64, dtype, true);         // chunk wider than the vocabulary
    check_cross_entropy(300, 72, 5003, 1024, dtype, true);  // odd sizes, several full chunks
  }
}

TEST_CASE("fused_kernels CUDA: the layers refuse what the kernels cannot take, saying what") {
  TITAN_REQUIRE_CUDA("to build CUDA operands for the checks");
  auto gpu = at::TensorOptions().device(at::kCUDA);
  fused::CudaSwiGLU swiglu;
  at::Tensor a = at::randn({4, 8}, gpu);
  CHECK_THROWS_WITH_AS(swiglu.forward(a.cpu(), a.cpu()), doctest::Contains("run on a CUDA device"), titan::Error);
  CHECK_THROWS_WITH_AS(swiglu.forward(a.to(at::kHalf), a.to(at::kHalf)), doctest::Contains("Float or BFloat16"),
                       titan::Error);
  CHECK_THROWS_WITH_AS(swiglu.forward(a, a.to(at::kBFloat16)), doctest::Contains("up is BFloat16"), titan::Error);
  CHECK_THROWS_WITH_AS(swiglu.forward(a, at::randn({4, 9}, gpu)), doctest::Contains("expected sizes"),
                       titan::Error);

  auto norm = std::make_shared<titan::RMSNorm>(8, 1e-5, gpu);
  fused::CudaRMSNorm layer(norm);
  CHECK_THROWS_WITH_AS(layer.forward(a.to(at::kBFloat16)), doctest::Contains("weight is Float"), titan::Error);

  fused::CudaRotary rope;
  at::Tensor x = at::randn({1, 5, 2, 6}, gpu), table = at::randn({4, 3}, gpu);
  CHECK_THROWS_WITH_AS(rope.forward(x, table, table), doctest::Contains("at least 5 rows"), titan::Error);

  titan::LossFn loss = fused::cuda_chunked_linear_cross_entropy(at::randn({11, 8}, gpu), 4);
  CHECK_THROWS_WITH_AS(loss(at::randn({1, 3, 8}, gpu), at::zeros({1, 3}, gpu.dtype(at::kInt))),
                       doctest::Contains("labels is Int"), titan::Error);
  CHECK_THROWS_WITH_AS(loss(at::randn({1, 3, 7}, gpu), at::zeros({1, 3}, gpu.dtype(at::kLong))),
                       doctest::Contains("expected sizes"), titan::Error);
}
