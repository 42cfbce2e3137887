// The fused_kernels plugin's CPU linear (plugins/fused_kernels/cpu_linear.h)
// and its products (titan/onednn_matmul.hpp): through oneDNN on CPUs with AVX-512, equal
// to at::linear / at::mm forward and backward within 1e-5 of the largest
// value (a different summation order); transposed views pass as they are;
// meta and bf16 inputs take the wrapped titan::Linear.
#include <memory>
#include <string>

#include "close_to_reference.hpp"
#include "cpu_linear.h"
#include "titan/onednn_matmul.hpp"
#include "doctest_torch.hpp"
#include "titan/layers.hpp"

namespace {

namespace fused = titan::fused;

constexpr double kTolerance = 1e-5;  // relative to the reference's largest magnitude

void check_linear_close(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  titan::test::check_close_to_reference(actual, expected, kTolerance, what);
}

std::shared_ptr<titan::Linear> make_linear(const at::Tensor& weight) {
  auto linear = std::make_shared<titan::Linear>(weight.size(1), weight.size(0), weight.options());
  at::NoGradGuard no_grad;
  linear->weight.copy_(weight);
  return linear;
}

}  // namespace

TEST_CASE("fused_kernels cpu linear: oneDNN is chosen exactly where the CPU has AVX-512") {
  // The wheel's LibTorch has oneDNN; a failed lookup of its op would show here.
  CHECK(titan::onednn_matmul_preferred() == static_cast<bool>(__builtin_cpu_supports("avx512f")));
}

TEST_CASE("fused_kernels cpu linear: a @ b^T equals at::mm for contiguous and transposed operands") {
  torch::manual_seed(0);
  // Both sides of kOneDnnMinMultiplies (at::mm below, oneDNN above where preferred).
  static_assert(300 * 256 * 129 >= titan::kOneDnnMinMultiplies && 64 * 32 * 48 < titan::kOneDnnMinMultiplies);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{64, 32, 48}, {5, 37, 3}, {1, 8, 1}, {300, 256, 129}}) {
    at::Tensor a = at::randn({m, k}), b = at::randn({n, k});
    std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    check_linear_close(titan::matmul_nt(a, b), at::mm(a, b.t()), shape);
    at::Tensor a_view = at::randn({k, m}).t(), b_view = at::randn({k, n}).t();  // strides (1, m), (1, n)
    check_linear_close(titan::matmul_nt(a_view, b_view), at::mm(a_view, b_view.t()), shape + " transposed views");
  }
}

TEST_CASE("fused_kernels cpu linear: forward and backward equal at::linear on 2-D and 3-D inputs") {
  torch::manual_seed(1);
  for (auto sizes : {std::vector<int64_t>{8, 16, 32}, std::vector<int64_t>{7, 37}}) {
    const int64_t in = sizes.back(), out = 19;
    at::Tensor weight = at::randn({out, in}) * 0.1;
    auto reference = make_linear(weight);
    auto layer = std::make_shared<fused::CpuLinear>(make_linear(weight));
    at::Tensor x = at::randn(sizes);
    at::Tensor x_ref = x.clone().set_requires_grad(true), x_fused = x.clone().set_requires_grad(true);
    at::Tensor y_ref = reference->forward(x_ref), y = layer->forward(x_fused);
    if (titan::onednn_matmul_preferred()) CHECK(y.grad_fn()->name().find("CpuLinear") != std::string::npos);
    at::Tensor grad = at::randn(y_ref.sizes());
    y_ref.backward(grad);
    y.backward(grad);
    const std::string name = std::to_string(sizes.size()) + "-D input";
    check_linear_close(y, y_ref, name + " y");
    check_linear_close(x_fused.grad(), x_ref.grad(), name + " grad_input");
    // The wrapper keeps the inner layer's parameter under its name.
    check_linear_close(layer->named_parameters()["weight"].grad(), reference->weight.grad(), name + " grad_weight");
  }
}

TEST_CASE("fused_kernels cpu linear: a frozen weight, an input without grad, grad mode off, meta and bf16") {
  torch::manual_seed(2);
  at::Tensor weight = at::randn({6, 4});
  auto layer = std::make_shared<fused::CpuLinear>(make_linear(weight));
  at::Tensor x = at::randn({3, 4});
  {
    at::NoGradGuard no_grad;
    at::Tensor y = layer->forward(x);
    CHECK_FALSE(y.requires_grad());
    check_linear_close(y, at::linear(x, weight), "grad mode off");
  }
  // Only the weight wants a gradient: the input's product is skipped.
  at::Tensor y = layer->forward(x);
  y.sum().backward();
  check_linear_close(layer->named_parameters()["weight"].grad(), at::ones({3, 6}).t().mm(x), "weight grad alone");

  auto meta = std::make_shared<fused::CpuLinear>(std::make_shared<titan::Linear>(4, 6, at::kMeta));
  at::Tensor meta_out = meta->forward(at::empty({2, 5, 4}, at::kMeta));
  CHECK(meta_out.is_meta());
  CHECK(meta_out.sizes() == at::IntArrayRef({2, 5, 6}));

  auto bf16 = std::make_shared<fused::CpuLinear>(make_linear(weight.to(at::kBFloat16)));
  at::Tensor xb = x.to(at::kBFloat16);
  at::Tensor yb = bf16->forward(xb);
  CHECK((yb.scalar_type() == at::kBFloat16));
  CHECK(at::equal(yb, at::linear(xb, weight.to(at::kBFloat16))));
}
