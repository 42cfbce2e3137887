// clip_grad_norm follows torch.nn.utils.clip_grad_norm_: the total norm
// before clipping, grads scaled by max_norm / (norm + 1e-6) when above, and
// a reduce hook that sees the partial a distributed run would combine.
#include "doctest_torch.hpp"

#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "titan/error.hpp"
#include "titan/grad_clip.hpp"

namespace {

// Parameters with fixed random gradients (scaled so the norm is ~scale * 6).
std::vector<at::Tensor> params_with_grads(double scale, at::ScalarType dtype = at::kDouble) {
  torch::manual_seed(7);
  std::vector<at::Tensor> params;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4, 5}, {7}, {2, 3, 2}}) {
    at::Tensor p = torch::zeros(shape, torch::dtype(dtype)).set_requires_grad(true);
    p.mutable_grad() = (torch::randn(shape, torch::dtype(at::kDouble)) * scale).to(dtype);
    params.push_back(p);
  }
  return params;
}

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().clone());
  return out;
}

// sum(|g|^p)^(1/p) over every element, or max |g|, in plain loops.
double reference_norm(const std::vector<at::Tensor>& grads, double p) {
  double sum = 0, largest = 0;
  for (const auto& g : grads) {
    at::Tensor flat = g.to(at::kDouble).contiguous().view(-1);
    for (int64_t i = 0; i < flat.numel(); ++i) {
      double v = std::abs(flat.data_ptr<double>()[i]);
      sum += std::pow(v, p);
      largest = std::max(largest, v);
    }
  }
  return std::isinf(p) ? largest : std::pow(sum, 1 / p);
}

}  // namespace

TEST_CASE("clip_grad_norm returns the global norm and scales the gradients by max_norm / (norm + 1e-6)") {
  for (double p : {2.0, 1.0, 3.0, titan::kInfNorm}) {
    CAPTURE(p);
    auto params = params_with_grads(1.0);
    auto before = grads_of(params);
    double expected = reference_norm(before, p);
    REQUIRE(expected > 0.5);
    double total = titan::clip_grad_norm(params, 0.5, p);
    CHECK(total == doctest::Approx(expected).epsilon(1e-6));
    double coef = 0.5 / (expected + 1e-6);
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK(torch::allclose(params[i].grad(), before[i] * coef, 1e-9, 1e-12));
    }
    CHECK(reference_norm(grads_of(params), p) == doctest::Approx(0.5).epsilon(1e-5));

    // LibTorch's own clip_grad_norm_ on the same gradients agrees.
    auto theirs = params_with_grads(1.0);
    double their_total = torch::nn::utils::clip_grad_norm_(theirs, 0.5, p);
    CHECK(total == doctest::Approx(their_total).epsilon(1e-6));
    for (size_t i = 0; i < params.size(); ++i) CHECK(torch::allclose(params[i].grad(), theirs[i].grad(), 1e-6, 1e-9));
  }
}

TEST_CASE("clip_grad_norm leaves gradients alone under max_norm, when max_norm <= 0, and skips params without grads") {
  auto params = params_with_grads(0.01);
  auto before = grads_of(params);
  double expected = reference_norm(before, 2.0);
  CHECK(titan::clip_grad_norm(params, 1.0) == doctest::Approx(expected).epsilon(1e-9));
  for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i].grad(), before[i]));

  auto big = params_with_grads(10.0);
  auto big_before = grads_of(big);
  CHECK(titan::clip_grad_norm(big, 0.0) == doctest::Approx(reference_norm(big_before, 2.0)).epsilon(1e-9));
  CHECK(titan::clip_grad_norm(big, -1.0) == doctest::Approx(reference_norm(big_before, 2.0)).epsilon(1e-9));
  for (size_t i = 0; i < big.size(); ++i) CHECK(torch::equal(big[i].grad(), big_before[i]));

  at::Tensor no_grad = torch::ones({3}).set_requires_grad(true);
  params.push_back(no_grad);
  params.push_back(at::Tensor());
  CHECK(titan::clip_grad_norm(params, 1.0) == doctest::Approx(expected).epsilon(1e-9));
  CHECK_FALSE(no_grad.grad().defined());
  CHECK(titan::clip_grad_norm({no_grad}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm hands the local partial to the reduce hook: sum of |g|^p, or max |g| for inf") {
  auto params = params_with_grads(1.0);
  auto before = grads_of(params);
  double local = reference_norm(before, 2.0);
  double seen = -1;
  titan::NormReduceOp seen_op = titan::NormReduceOp::max;
  // As if 4 ranks each held gradients like these: the sum of squares quadruples.
  double total = titan::clip_grad_norm(params, 1.0, 2.0, [&](double partial, titan::NormReduceOp op) {
    seen = partial;
    seen_op = op;
    return 4 * partial;
  });
  CHECK(seen == doctest::Approx(local * local).epsilon(1e-9));
  CHECK((seen_op == titan::NormReduceOp::sum));
  CHECK(total == doctest::Approx(2 * local).epsilon(1e-9));
  CHECK(torch::allclose(params[0].grad(), before[0] * (1.0 / (2 * local + 1e-6)), 1e-9, 1e-12));

  auto inf_params = params_with_grads(1.0);
  double local_max = reference_norm(grads_of(inf_params), titan::kInfNorm);
  double inf_total = titan::clip_grad_norm(inf_params, 100.0, titan::kInfNorm, [&](double partial, titan::NormReduceOp op) {
    seen = partial;
    seen_op = op;
    return std::max(partial, 42.0);  // another rank holds a larger element
  });
  CHECK(seen == doctest::Approx(local_max).epsilon(1e-12));
  CHECK((seen_op == titan::NormReduceOp::max));
  CHECK(inf_total == doctest::Approx(42.0));
}

TEST_CASE("clip_grad_norm accumulates bf16 gradients in fp32, and returns a non-finite norm without touching grads") {
  at::Tensor p = torch::zeros({1000}, torch::dtype(at::kBFloat16)).set_requires_grad(true);
  p.mutable_grad() = torch::ones({1000}, torch::dtype(at::kBFloat16));
  // A bf16 result would be 31.625; fp32 accumulation gives sqrt(1000).
  CHECK(titan::clip_grad_norm({p}, 0.0) == doctest::Approx(std::sqrt(1000.0)).epsilon(1e-6));
  double clipped = titan::clip_grad_norm({p}, 1.0);
  CHECK(clipped == doctest::Approx(std::sqrt(1000.0)).epsilon(1e-6));
  CHECK((p.grad().scalar_type() == at::kBFloat16));
  CHECK(p.grad().to(at::kFloat)[0].item<double>() == doctest::Approx(1 / std::sqrt(1000.0)).epsilon(1e-2));

  auto params = params_with_grads(1.0, at::kFloat);
  params[1].mutable_grad()[3] = std::nan("");
  auto before = grads_of(params);
  CHECK(std::isnan(titan::clip_grad_norm(params, 1.0)));
  CHECK(torch::equal(params[0].grad(), before[0]));
  params[1].mutable_grad()[3] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(titan::clip_grad_norm(params, 1.0)));
  CHECK(std::isinf(titan::clip_grad_norm(params, 1.0, titan::kInfNorm)));
  params[1].mutable_grad()[3] = std::nan("");
  CHECK(std::isnan(titan::clip_grad_norm(params, 1.0, titan::kInfNorm)));
  CHECK(torch::equal(params[2].grad(), before[2]));

  CHECK_THROWS_AS(titan::clip_grad_norm(params, 1.0, 0.0), titan::Error);
  CHECK_THROWS_AS(titan::clip_grad_norm(params, 1.0, -2.0), titan::Error);
}

TEST_CASE("the 2-norm of CPU gradients is summed in fp64 in place: exact for large, strided, half, bf16 and fp64 "
          "gradients, the same bits on any thread count, and the same scale as the tensor path") {
  torch::manual_seed(11);
  std::vector<at::Tensor> params;
  auto add = [&](const at::Tensor& grad) {
    at::Tensor p = torch::zeros(grad.sizes(), grad.options()).set_requires_grad(true);
    p.mutable_grad() = grad;
    params.push_back(p);
  };
  add(torch::randn({300007}) * 1e-2 + 3e-3);       // many blocks of the fp64 loops, an odd tail
  add(torch::randn({64, 48}).t());                   // strided (a transposed view)
  add(torch::randn({1001}).to(at::kHalf));
  add(torch::randn({999}).to(at::kBFloat16));
  add(torch::randn({77}, torch::dtype(at::kDouble)));
  const auto before = grads_of(params);
  const double expected = reference_norm(before, 2.0);

  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const double one_thread = titan::clip_grad_norm_on_device(params, 0.0).item<double>();
  at::set_num_threads(2);
  const double two_threads = titan::clip_grad_norm_on_device(params, 0.0).item<double>();
  at::set_num_threads(threads);
  CHECK(one_thread == doctest::Approx(expected).epsilon(1e-13));
  CHECK(std::memcmp(&one_thread, &two_threads, sizeof(double)) == 0);

  // The host path's norm and scale against the tensor path's (a reduce hook
  // that adds nothing takes it): the same bits.
  auto theirs = params;
  for (auto& p : theirs) {
    p = p.detach().clone().set_requires_grad(true);
    p.mutable_grad() = before[&p - theirs.data()].clone();
  }
  const at::Tensor ours = titan::clip_grad_norm_on_device(params, 0.5);
  const at::Tensor tensor_path =
      titan::clip_grad_norm_on_device(theirs, 0.5, 2.0, [](at::Tensor&, titan::NormReduceOp) {});
  CHECK(ours.item<double>() == tensor_path.item<double>());
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::equal(params[i].grad(), theirs[i].grad()));
    CHECK_FALSE(torch::equal(params[i].grad(), before[i]));
  }
}
