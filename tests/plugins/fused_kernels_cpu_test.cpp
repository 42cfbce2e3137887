// The fused CPU kernels (plugins/fused_kernels/cpu_layers.h) equal the ATen
// path the llama3 model runs, in fp32, forward and backward against
// autograd: RMSNorm, rotary embedding and SwiGLU within 1e-6 of each
// tensor's largest magnitude (RMSNorm's weight gradient, a sum over rows,
// within 1e-5), the linear + cross-entropy within 1e-5; at odd sizes, on
// non-contiguous inputs, with ignored labels and a vocabulary that is not a
// multiple of the chunk. Each layer takes the ATen path for meta tensors
// (`titan plan`) and bf16, and works with grad mode off.
#include <memory>
#include <string>

#include "close_to_reference.hpp"
#include "cpu_layers.h"
#include "doctest_torch.hpp"
#include "tensor_support.hpp"
#include "fused_ops.h"
#include "titan/layers.hpp"

namespace {

namespace fused = titan::fused;

constexpr double kElementwise = 1e-6;  // relative to the reference's largest magnitude
constexpr double kSummed = 1e-5;       // sums over rows or the vocabulary

void check_close(const at::Tensor &actual, const at::Tensor &expected, double tolerance, const std::string &what) {
  titan::test::check_close_to_reference(actual, expected, tolerance, what);
}

// Whether the output's autograd node, or one just below it (RMSNorm's
// output is a view), is one of the kernels' functions (Cpu...Function).
bool made_by_kernel(const at::Tensor &out) {
  const auto &node = out.grad_fn();
  if (!node) return false;
  if (node->name().find("Cpu") != std::string::npos) return true;
  for (const auto &edge : node->next_edges()) {
    if (edge.function && edge.function->name().find("Cpu") != std::string::npos) return true;
  }
  return false;
}

// The output came from the fused kernel, not from the ATen fallback.
void check_fused_path(const at::Tensor &out, const std::string &what) {
  INFO(what);
  CHECK(made_by_kernel(out));
}

using titan::test::leaf;

std::shared_ptr<titan::RMSNorm> make_norm(const at::Tensor &weight, const at::TensorOptions &options) {
  auto norm = std::make_shared<titan::RMSNorm>(weight.size(0), 1e-5, options);
  at::NoGradGuard no_grad;
  norm->weight.copy_(weight);
  return norm;
}

// x_storage is the leaf; view(x_storage) is what the layer sees.
template <class View>
void check_rmsnorm(const at::Tensor &x_storage, View view, const std::string &name) {
  at::Tensor probe = view(x_storage);
  int64_t dim = probe.size(-1);
  at::Tensor weight = at::randn({dim}) * 0.5 + 1, grad_out = at::randn(probe.sizes());
  auto reference = make_norm(weight, at::kFloat);
  auto fused_norm = std::make_shared<fused::CpuRMSNorm>(make_norm(weight, at::kFloat));
  at::Tensor x_ref = leaf(x_storage), x_fused = leaf(x_storage);
  at::Tensor y_ref = reference->forward(view(x_ref));
  at::Tensor y = fused_norm->forward(view(x_fused));
  check_fused_path(y, name);
  y_ref.backward(grad_out);
  y.backward(grad_out);
  check_close(y, y_ref, kElementwise, name + " y");
  check_close(x_fused.grad(), x_ref.grad(), kElementwise, name + " grad_x");
  check_close(fused_norm->parameters()[0].grad(), reference->weight.grad(), kSummed, name + " grad_weight");
}

at::Tensor same(const at::Tensor &t) { return t; }

template <class View>
void check_rope(const at::Tensor &x_storage, View view, int64_t head_dim, const std::string &name,
                bool strided_grad = false) {
  at::Tensor probe = view(x_storage);
  int64_t seq = probe.size(1);
  at::Tensor angles = at::outer(at::arange(seq + 3, at::kFloat), at::rand({head_dim / 2}) * 2);
  at::Tensor cos = angles.cos(),
             sin = angles.sin();  // longer than seq, as the model's tables
  at::Tensor grad_out = strided_grad ? at::randn({probe.size(0), probe.size(2), seq, head_dim}).transpose(1, 2)
                                     : at::randn(probe.sizes());
  at::Tensor x_ref = leaf(x_storage), x_fused = leaf(x_storage);
  titan::Rotary reference;
  fused::CpuRotary rotary;
  at::Tensor out_ref = reference.forward(view(x_ref), cos, sin);
  at::Tensor out = rotary.forward(view(x_fused), cos, sin);
  check_fused_path(out, name);
  out_ref.backward(grad_out);
  out.backward(grad_out);
  check_close(out, out_ref, kElementwise, name + " forward");
  check_close(x_fused.grad(), x_ref.grad(), kElementwise, name + " backward");
}

// gate and up as the two halves of one [..., 2 * width] tensor when split.
void check_swiglu(at::IntArrayRef shape, bool split, const std::string &name) {
  std::vector<int64_t> storage_shape(shape.begin(), shape.end());
  if (split) storage_shape.back() *= 2;
  at::Tensor a_storage = at::randn(storage_shape) * 3, b_storage = at::randn(storage_shape);
  if (a_storage.numel() > 2) {  // silu's tails: exp overflows and underflows
    a_storage.view(-1)[0] = -100;
    a_storage.view(-1)[1] = 100;
  }
  auto view = [&](const at::Tensor &t) { return split ? t.chunk(2, -1)[1] : t; };
  at::Tensor a_ref = leaf(a_storage), b_ref = leaf(b_storage), a_fused = leaf(a_storage), b_fused = leaf(b_storage);
  at::Tensor grad_out = at::randn(shape);
  titan::SwiGLU reference;
  fused::CpuSwiGLU swiglu;
  at::Tensor out_ref = reference.forward(view(a_ref), view(b_ref));
  at::Tensor out = swiglu.forward(view(a_fused), view(b_fused));
  check_fused_path(out, name);
  out_ref.backward(grad_out);
  out.backward(grad_out);
  check_close(out, out_ref, kElementwise, name + " forward");
  check_close(a_fused.grad(), a_ref.grad(), kElementwise, name + " grad_gate");
  check_close(b_fused.grad(), b_ref.grad(), kElementwise, name + " grad_up");
}

void check_cross_entropy(int64_t batch, int64_t seq, int64_t dim, int64_t vocab, int64_t chunk, bool with_ignored,
                         bool transposed_hidden) {
  std::string name = "cross_entropy tokens " + std::to_string(batch * seq) + " vocab " + std::to_string(vocab) +
                     " chunk " + std::to_string(chunk) + (with_ignored ? " ignored" : "") +
                     (transposed_hidden ? " transposed" : "");
  at::manual_seed(batch * seq * 13 + vocab);
  at::Tensor hidden_storage = transposed_hidden ? at::randn({seq, batch, dim}) : at::randn({batch, seq, dim});
  auto view = [&](const at::Tensor &t) { return transposed_hidden ? t.transpose(0, 1) : t; };
  at::Tensor weight = at::randn({vocab, dim}) * 0.2;
  at::Tensor labels = at::randint(vocab, {batch, seq}, at::kLong);
  if (with_ignored) labels.view(-1).index_put_({at::arange(0, batch * seq, 3)}, -100);
  at::Tensor grad_loss = at::full({}, 0.75, at::kFloat);

  at::Tensor h_ref = leaf(hidden_storage), w_ref = leaf(weight), h_fused = leaf(hidden_storage), w_fused = leaf(weight);
  at::Tensor loss_ref = titan::cross_entropy_loss(at::linear(view(h_ref), w_ref), labels);
  at::Tensor loss = fused::cpu_chunked_linear_cross_entropy(w_fused, chunk)(view(h_fused), labels);
  check_fused_path(loss, name);
  loss_ref.backward(grad_loss);
  loss.backward(grad_loss);
  check_close(loss, loss_ref, kSummed, name + " loss");
  check_close(h_fused.grad(), h_ref.grad(), kSummed, name + " grad_hidden");
  check_close(w_fused.grad(), w_ref.grad(), kSummed, name + " grad_weight");
}

}  // namespace

TEST_CASE(
    "fused_kernels cpu: the CPU runs the kernels (AVX2 + FMA), else "
    "every case below is meaningless") {
  REQUIRE(fused::cpu_kernels_supported());
}

TEST_CASE("fused_kernels cpu: RMSNorm equals the ATen path forward and backward") {
  at::manual_seed(1);
  check_rmsnorm(at::randn({5, 37}), same, "rows 5 dim 37");
  check_rmsnorm(at::randn({8, 128, 256}), same, "debug model [8, 128, 256]");
  check_rmsnorm(at::randn({1, 3}), same, "one row dim 3");
  check_rmsnorm(at::randn({3, 7, 300}), same, "rows 21 dim 300");
  check_rmsnorm(
      at::randn({37, 6}), [](const at::Tensor &t) { return t.t(); }, "transposed [6, 37]");
}

TEST_CASE(
    "fused_kernels cpu: RMSNorm's weight gradient is the same bit for "
    "bit run to run") {
  at::manual_seed(2);
  at::Tensor x = at::randn({257, 64}), grad_out = at::randn({257, 64});
  auto norm = std::make_shared<fused::CpuRMSNorm>(make_norm(at::randn({64}), at::kFloat));
  at::Tensor weight = norm->parameters()[0];
  norm->forward(x).backward(grad_out);
  at::Tensor first = weight.grad().clone();
  weight.mutable_grad().reset();
  norm->forward(x).backward(grad_out);
  CHECK(at::equal(weight.grad(), first));
}

TEST_CASE(
    "fused_kernels cpu: RoPE (interleaved pairs) equals the ATen path "
    "forward and backward") {
  at::manual_seed(3);
  check_rope(at::randn({2, 17, 3, 24}), same, 24, "b2 s17 h3 d24");
  check_rope(at::randn({8, 128, 16, 16}), same, 16, "debug model [8, 128, 16, 16]");
  check_rope(at::randn({1, 1, 1, 2}), same, 2, "one pair");
  check_rope(at::randn({2, 5, 2, 10}), same, 10, "d10 (a vector and a pair)");
  // q out of a fused [batch, seq, 3 * heads * head_dim] projection.
  check_rope(
      at::randn({2, 9, 3 * 4 * 24}),
      [](const at::Tensor &t) {
        return t.narrow(2, 96, 96).view({2, 9, 4, 24});
      },
      24, "narrowed view of a fused projection");
  check_rope(
      at::randn({2, 4, 9, 24}), [](const at::Tensor &t) { return t.transpose(1, 2); }, 24,
      "transposed [b, h, s, d] storage", /*strided_grad=*/true);
}

TEST_CASE("fused_kernels cpu: SwiGLU equals the ATen path forward and backward") {
  at::manual_seed(4);
  check_swiglu({5, 37}, false, "[5, 37]");
  check_swiglu({8, 128, 768}, false, "debug model [8, 128, 768]");
  check_swiglu({1}, false, "one element");
  check_swiglu({3, 7, 45}, true, "halves of a fused [3, 7, 90] projection");
}

TEST_CASE(
    "fused_kernels cpu: chunked linear + cross-entropy equals linear + "
    "cross_entropy forward and backward") {
  check_cross_entropy(2, 12, 32, 1000, 128, false,
                      false);                           // vocab not a multiple of the chunk; 8 token blocks
  check_cross_entropy(1, 1, 16, 77, 32, false, false);  // one token
  check_cross_entropy(3, 10, 16, 300, 300, true,
                      false);  // one block, ignored labels
  check_cross_entropy(3, 3, 8, 50, 64, true,
                      true);  // chunk wider than the vocabulary, transposed hidden
  check_cross_entropy(8, 128, 256, 2048, 8192, false,
                      false);                            // the debug model's loss
  check_cross_entropy(5, 7, 37, 1001, 100, true, true);  // odd everything
}

TEST_CASE(
    "fused_kernels cpu: cross-entropy with a frozen weight, with grad "
    "mode off, and with a bad label") {
  at::manual_seed(5);
  at::Tensor hidden = at::randn({2, 6, 16}), weight = at::randn({90, 16}) * 0.2;
  at::Tensor labels = at::randint(90, {2, 6}, at::kLong);
  at::Tensor reference = titan::cross_entropy_loss(at::linear(hidden, weight), labels);
  auto loss = fused::cpu_chunked_linear_cross_entropy(weight, 32);

  at::Tensor h = leaf(hidden);
  at::Tensor out = loss(h, labels);
  out.backward();
  at::Tensor h_ref = leaf(hidden);
  titan::cross_entropy_loss(at::linear(h_ref, weight), labels).backward();
  check_close(h.grad(), h_ref.grad(), kSummed, "grad_hidden, weight frozen");
  CHECK_FALSE(weight.grad().defined());
  {
    at::NoGradGuard no_grad;
    check_close(loss(hidden, labels), reference, kSummed, "loss, grad mode off");
  }
  labels.view(-1)[4] = 90;
  CHECK_THROWS_WITH(loss(hidden, labels), doctest::Contains("label 90 of token 4 is outside [0, 90)"));
  CHECK_THROWS_WITH(fused::cpu_chunked_linear_cross_entropy(weight, 0), doctest::Contains("chunk must be positive"));
}

TEST_CASE("fused_kernels cpu: grad mode off gives the same outputs") {
  at::manual_seed(6);
  at::NoGradGuard no_grad;
  at::Tensor x = at::randn({4, 9, 2, 8}), angles = at::randn({9, 4});
  auto weight = at::randn({8});
  auto norm = std::make_shared<fused::CpuRMSNorm>(make_norm(weight, at::kFloat));
  check_close(norm->forward(x), fused::reference_rmsnorm(x, weight, 1e-5), kElementwise, "rmsnorm");
  check_close(fused::CpuRotary().forward(x, angles.cos(), angles.sin()),
              fused::reference_rope(x, angles.cos(), angles.sin()), kElementwise, "rope");
  check_close(fused::CpuSwiGLU().forward(x, x * 2), fused::reference_swiglu(x, x * 2), kElementwise, "swiglu");
}

TEST_CASE("fused_kernels cpu: meta and bf16 tensors take the ATen path") {
  auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kFloat);
  at::Tensor x = at::empty({2, 5, 3, 8}, meta), table = at::empty({7, 4}, meta);
  auto norm = std::make_shared<fused::CpuRMSNorm>(std::make_shared<titan::RMSNorm>(8, 1e-5, meta));
  at::Tensor normed = norm->forward(x);
  CHECK(normed.is_meta());
  CHECK(normed.sizes() == x.sizes());
  at::Tensor rotated = fused::CpuRotary().forward(x, table, table);
  CHECK(rotated.is_meta());
  CHECK(rotated.sizes() == x.sizes());
  at::Tensor gated = fused::CpuSwiGLU().forward(x, x);
  CHECK(gated.is_meta());
  CHECK(gated.sizes() == x.sizes());
  at::Tensor weight = at::empty({11, 8}, meta).requires_grad_();
  at::Tensor loss =
      fused::cpu_chunked_linear_cross_entropy(weight, 4)(x.view({2, 15, 8}), at::empty({2, 15}, meta.dtype(at::kLong)));
  CHECK(loss.is_meta());
  CHECK(loss.dim() == 0);

  // bf16: the model's own math (same values as the reference, not the kernel's
  // grad_fn).
  at::manual_seed(7);
  at::Tensor xb = at::randn({3, 16}).to(at::kBFloat16).requires_grad_();
  auto norm_b = std::make_shared<fused::CpuRMSNorm>(make_norm(at::ones({16}), at::kBFloat16));
  at::Tensor yb = norm_b->forward(xb);
  CHECK((yb.scalar_type() == at::kBFloat16));
  CHECK_FALSE(made_by_kernel(yb));
  CHECK(at::equal(yb, fused::reference_rmsnorm(xb, at::ones({16}, at::kBFloat16), 1e-5)));
  at::Tensor sb = fused::CpuSwiGLU().forward(xb, xb);
  CHECK_FALSE(made_by_kernel(sb));
  CHECK(at::equal(sb, fused::reference_swiglu(xb, xb)));
}
