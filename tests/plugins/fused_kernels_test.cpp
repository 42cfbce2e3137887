// The fused kernels' algorithms, emulated on CPU as the CUDA kernels run
// them, equal the ATen path the model uses today (forward, and backward
// against autograd) in fp32 tightly and in bf16 within its rounding; the
// chunked cross-entropy's peak memory is O(tokens x chunk); the plugin
// wires exactly the CPU kernels asked for on a CPU device.
#include "doctest_torch.hpp"
#include "tensor_support.hpp"
#include "titan/peak_memory.hpp"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <typeinfo>

#include "fused_ops.h"
#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/model.hpp"
#include "titan/parallelizer.hpp"
#include "titan/registry.hpp"

namespace {

namespace fused = titan::fused;

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(at::ScalarType dtype) { return dtype == at::kFloat ? Tolerance{1e-5, 1e-5} : Tolerance{2e-2, 2e-2}; }

// Names the tensor and the worst error when two tensors differ.
void check_close(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol, const std::string& what) {
  INFO(what);
  REQUIRE(actual.sizes() == expected.sizes());
  at::Tensor a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  double worst = (a - e).abs().max().item<double>();
  INFO("max abs error " << worst);
  CHECK(at::allclose(a, e, tol.rtol, tol.atol));
}

at::Tensor randn(at::IntArrayRef shape, at::ScalarType dtype, double scale = 1.0) {
  return (at::randn(shape, at::kFloat) * scale).to(dtype);
}

// (autograd input, its detached copy for the emulation)
using titan::test::leaf;

using titan::test::dtype_name;

void check_rmsnorm(int64_t rows, int64_t dim, at::ScalarType dtype) {
  at::manual_seed(rows * 131 + dim);
  at::Tensor x = randn({rows, dim}, dtype), weight = randn({dim}, dtype, 0.5).add(1);
  at::Tensor grad_y = randn({rows, dim}, dtype);
  at::Tensor x_ref = leaf(x), w_ref = leaf(weight);
  at::Tensor y_ref = fused::reference_rmsnorm(x_ref, w_ref, 1e-5);
  y_ref.backward(grad_y);
  auto forward = fused::emulated_rmsnorm_forward(x, weight, 1e-5);
  auto grads = fused::emulated_rmsnorm_backward(grad_y, x, weight, forward.rstd);
  Tolerance tol = tolerance_for(dtype);
  std::string name = std::string("rmsnorm ") + dtype_name(dtype) + " rows " + std::to_string(rows);
  check_close(forward.y, y_ref, tol, name + " y");
  check_close(grads.grad_x, x_ref.grad(), tol, name + " grad_x");
  // grad_weight sums over rows: bf16 rounding grows with the row count.
  Tolerance sum_tol = dtype == at::kFloat ? Tolerance{1e-4, 1e-4} : Tolerance{3e-2, 0.1};
  check_close(grads.grad_weight, w_ref.grad(), sum_tol, name + " grad_weight");
}

void check_rope(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, at::ScalarType dtype) {
  at::manual_seed(seq * 7 + heads);
  at::Tensor angles = at::outer(at::arange(seq + 3, at::kFloat), at::rand({head_dim / 2}) * 2);
  at::Tensor cos = angles.cos(), sin = angles.sin();  // longer than seq, as the model's tables
  at::Tensor x = randn({batch, seq, heads, head_dim}, dtype), grad_out = randn(x.sizes(), dtype);
  at::Tensor x_ref = leaf(x);
  at::Tensor out_ref = fused::reference_rope(x_ref, cos, sin);
  out_ref.backward(grad_out);
  Tolerance tol = tolerance_for(dtype);
  std::string name = std::string("rope ") + dtype_name(dtype);
  check_close(fused::emulated_rope(x, cos, sin, +1), out_ref, tol, name + " forward");
  check_close(fused::emulated_rope(grad_out, cos, sin, -1), x_ref.grad(), tol, name + " backward");
}

void check_swiglu(at::IntArrayRef shape, at::ScalarType dtype) {
  at::manual_seed(shape[0]);
  at::Tensor a = randn(shape, dtype, 3), b = randn(shape, dtype), grad_out = randn(shape, dtype);
  at::Tensor a_ref = leaf(a), b_ref = leaf(b);
  at::Tensor out_ref = fused::reference_swiglu(a_ref, b_ref);
  out_ref.backward(grad_out);
  auto grads = fused::emulated_swiglu_backward(grad_out, a, b);
  Tolerance tol = tolerance_for(dtype);
  std::string name = std::string("swiglu ") + dtype_name(dtype);
  check_close(fused::emulated_swiglu_forward(a, b), out_ref, tol, name + " forward");
  check_close(grads.grad_a, a_ref.grad(), tol, name + " grad_a");
  check_close(grads.grad_b, b_ref.grad(), tol, name + " grad_b");
}

void check_cross_entropy(int64_t tokens, int64_t dim, int64_t vocab, int64_t chunk, at::ScalarType dtype,
                         bool with_ignored) {
  at::manual_seed(tokens * 13 + vocab);
  at::Tensor hidden = randn({tokens, dim}, dtype), weight = randn({vocab, dim}, dtype, 0.2);
  at::Tensor labels = at::randint(vocab, {tokens}, at::kLong);
  if (with_ignored && tokens > 1) labels.index_put_({at::arange(0, tokens, 3)}, -100);
  at::Tensor hidden_ref = leaf(hidden), weight_ref = leaf(weight);
  at::Tensor loss_ref = fused::reference_linear_cross_entropy(hidden_ref, weight_ref, labels);
  loss_ref.backward(at::full({}, 0.75, at::kFloat));
  auto forward = fused::emulated_chunked_cross_entropy_forward(hidden, weight, labels, chunk);
  auto grads = fused::emulated_chunked_cross_entropy_backward(hidden, weight, labels, forward.lse,
                                                              at::full({}, 0.75, at::kFloat), chunk);
  Tolerance tol = tolerance_for(dtype);
  std::string name = std::string("cross_entropy ") + dtype_name(dtype) + " tokens " + std::to_string(tokens) +
                     " vocab " + std::to_string(vocab) + " chunk " + std::to_string(chunk);
  check_close(forward.loss, loss_ref, tol, name + " loss");
  check_close(grads.grad_hidden, hidden_ref.grad(), tol, name + " grad_hidden");
  check_close(grads.grad_weight, weight_ref.grad(), tol, name + " grad_weight");
}

// Peak bytes allocated above the starting level while `body` runs.
template <class Body>
int64_t peak_extra_bytes(Body body) {
  return titan::peak_cpu_bytes_during(body);
}

}  // namespace

TEST_CASE("fused_kernels: RMSNorm emulation equals the ATen path forward and backward") {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_rmsnorm(64, 96, dtype);
    check_rmsnorm(1, 33, dtype);      // one row, odd width
    check_rmsnorm(1100, 40, dtype);   // more rows than the kernel's 512 row groups
  }
}

TEST_CASE("fused_kernels: RoPE emulation equals the ATen path forward and backward (interleaved pairs)") {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_rope(2, 17, 3, 16, dtype);
    check_rope(1, 1, 1, 2, dtype);
  }
}

TEST_CASE("fused_kernels: SwiGLU emulation equals the ATen path forward and backward") {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_swiglu({37, 53}, dtype);
    check_swiglu({1}, dtype);
  }
}

TEST_CASE("fused_kernels: chunked cross-entropy equals linear + cross_entropy forward and backward") {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    check_cross_entropy(24, 32, 1000, 128, dtype, false);  // vocab not a multiple of the chunk
    check_cross_entropy(1, 16, 77, 32, dtype, false);      // one token
    check_cross_entropy(30, 16, 300, 300, dtype, true);    // one chunk, ignored labels
    check_cross_entropy(9, 8, 50, 64, dtype, true);        // chunk wider than the vocabulary
  }
}

TEST_CASE("fused_kernels: the chunked cross-entropy's peak extra memory is O(tokens x chunk) not O(tokens x vocab)") {
  at::NoGradGuard no_grad;
  int64_t tokens = 256, dim = 16, vocab = 8192, chunk = 256;
  at::manual_seed(3);
  at::Tensor hidden = at::randn({tokens, dim}), weight = at::randn({vocab, dim}) * 0.2;
  at::Tensor labels = at::randint(vocab, {tokens}, at::kLong);
  int64_t full_logits = tokens * vocab * 4, chunk_logits = tokens * chunk * 4;
  int64_t outputs = (vocab * dim + tokens * dim) * 4;  // grad_weight and grad_hidden themselves
  // The reference makes the [tokens, vocab] fp32 logits: proves the tracker sees them.
  int64_t reference_peak = peak_extra_bytes([&] { fused::reference_linear_cross_entropy(hidden, weight, labels); });
  CHECK(reference_peak >= full_logits);
  fused::CrossEntropyForward forward;
  int64_t forward_peak = peak_extra_bytes(
      [&] { forward = fused::emulated_chunked_cross_entropy_forward(hidden, weight, labels, chunk); });
  int64_t backward_peak = peak_extra_bytes([&] {
    fused::emulated_chunked_cross_entropy_backward(hidden, weight, labels, forward.lse, at::ones({}), chunk);
  });
  INFO("full logits " << full_logits << " B, one chunk " << chunk_logits << " B, forward peak " << forward_peak
                      << " B, backward peak " << backward_peak << " B");
  // A few chunk-sized temporaries plus [tokens, dim] and [tokens] vectors.
  CHECK(forward_peak <= 4 * chunk_logits + 4 * tokens * dim * 4 + 64 * 1024);
  CHECK(backward_peak <= outputs + 4 * chunk_logits + 4 * tokens * dim * 4 + 64 * 1024);
  CHECK(backward_peak < full_logits / 2);
}

TEST_CASE("fused_kernels: the plugin wires its CPU kernels on a CPU device, exactly those asked for") {
  auto make = [](const std::string& yaml) {
    titan::PluginContext context;
    context.options = titan::ConfigNode::parse(yaml, "run.yaml");
    return titan::PluginRegistry::instance().create_parallelizer("fused_kernels", context);
  };
  titan::PluginContext model_context;
  model_context.options = titan::ConfigNode::parse("model:\n  flavor: debugmodel\n", "run.yaml").child("model");
  auto spec = titan::PluginRegistry::instance().create_model("llama3", model_context);
  // The layers' C++ types, by path, after the plugin ran (the wrappers keep
  // the parameter names, so names alone cannot tell).
  auto type_at = [](titan::CausalLM& model, const std::string& path) -> std::string {
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const torch::nn::Module& module = *item.value();
      if (item.key() == path) return typeid(module).name();
    }
    return "missing";
  };
  const std::string norm = "layers.0.attention_norm", rope = "layers.0.attention.rope",
                    sdpa = "layers.0.attention.sdpa", glu = "layers.0.feed_forward.swiglu";

  auto model = spec->build(c10::Device(c10::kMeta));
  const std::string aten_norm = type_at(*model, norm), aten_rope = type_at(*model, rope),
                    aten_sdpa = type_at(*model, sdpa), aten_glu = type_at(*model, glu);
  titan::ParallelizeContext cpu{*spec, c10::Device(c10::kCPU)};
  auto all_off = make("rmsnorm: false\nrope: false\nswiglu: false\ncross_entropy: false\nattention: false\n");
  CHECK(all_off->apply_order() == titan::ApplyOrder::kernel_optimization);
  CHECK_NOTHROW(all_off->parallelize(*model, cpu));
  CHECK(type_at(*model, norm) == aten_norm);
  CHECK(type_at(*model, sdpa) == aten_sdpa);

  // Some on: exactly those are swapped, the rest keep the ATen path.
  auto some_on = make("rmsnorm: true\nrope: false\nswiglu: false\ncross_entropy: false\nattention: true\n");
  some_on->parallelize(*model, cpu);
  CHECK(type_at(*model, norm).find("CpuRMSNorm") != std::string::npos);
  CHECK(type_at(*model, sdpa).find("CpuAttention") != std::string::npos);
  CHECK(type_at(*model, rope) == aten_rope);
  CHECK(type_at(*model, glu) == aten_glu);

  CHECK_THROWS_WITH_AS(make("cross_entropy_chunk: 0\n"), doctest::Contains("cross_entropy_chunk"), titan::Error);
}
