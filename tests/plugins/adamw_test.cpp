// The adamw plugin, loaded through the registry, follows torch.optim.AdamW:
// against a float64 reference written out here and against LibTorch's own
// torch::optim::AdamW; its state is allocated eagerly and aliased.
#include "doctest_torch.hpp"

#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/optimizer.hpp"
#include "titan/registry.hpp"

namespace {

std::unique_ptr<titan::OptimizerFactory> adamw_factory(const std::string& yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse(yaml, "test.yaml");
  return titan::PluginRegistry::instance().create_optimizer("adamw", context);
}

// A leaf parameter with fixed, reproducible values.
at::Tensor make_param(std::vector<int64_t> shape, int seed, at::ScalarType dtype = at::kFloat) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::dtype(at::kDouble)).to(dtype).set_requires_grad(true);
}

at::Tensor make_grad(const at::Tensor& param, int seed) {
  torch::manual_seed(1000 + seed);
  return torch::randn(param.sizes(), torch::dtype(at::kDouble)).to(param.scalar_type());
}

// torch.optim.AdamW's update for one parameter, in plain float64 loops.
struct ReferenceAdamW {
  double beta1, beta2, eps, weight_decay;
  std::vector<double> param, exp_avg, exp_avg_sq;
  int64_t step = 0;

  ReferenceAdamW(const at::Tensor& initial, double beta1, double beta2, double eps, double weight_decay)
      : beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay) {
    at::Tensor flat = initial.detach().to(at::kDouble).contiguous().view(-1);
    param.assign(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    exp_avg.assign(param.size(), 0.0);
    exp_avg_sq.assign(param.size(), 0.0);
  }

  void update(const at::Tensor& grad_tensor, double lr) {
    at::Tensor flat = grad_tensor.to(at::kDouble).contiguous().view(-1);
    const double* grad = flat.data_ptr<double>();
    ++step;
    double bias_correction1 = 1 - std::pow(beta1, step);
    double bias_correction2 = 1 - std::pow(beta2, step);
    for (size_t i = 0; i < param.size(); ++i) {
      param[i] *= 1 - lr * weight_decay;
      exp_avg[i] = beta1 * exp_avg[i] + (1 - beta1) * grad[i];
      exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (1 - beta2) * grad[i] * grad[i];
      double denom = std::sqrt(exp_avg_sq[i]) / std::sqrt(bias_correction2) + eps;
      param[i] -= lr / bias_correction1 * exp_avg[i] / denom;
    }
  }

  double max_abs_diff(const at::Tensor& actual) const {
    at::Tensor flat = actual.detach().to(at::kDouble).contiguous().view(-1);
    double worst = 0;
    for (size_t i = 0; i < param.size(); ++i) {
      worst = std::max(worst, std::abs(flat.data_ptr<double>()[i] - param[i]));
    }
    return worst;
  }
};

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.detach().to(at::kDouble) - b.detach().to(at::kDouble)).abs().max().item<double>();
}

const char* kOptions = "lr: 0.01\nbeta1: 0.9\nbeta2: 0.95\neps: 1.0e-8\nweight_decay: 0.1\n";

}  // namespace

TEST_CASE("AdamW matches a float64 reference over several steps, with weight decay and a per-step lr") {
  for (const std::string implementation : {"foreach", "for-loop"}) {
    CAPTURE(implementation);
    auto factory = adamw_factory(std::string(kOptions) + "implementation: " + implementation + "\n");
    at::Tensor w = make_param({4, 3}, 1);
    at::Tensor b = make_param({3}, 2);
    ReferenceAdamW ref_w(w, 0.9, 0.95, 1e-8, 0.1), ref_b(b, 0.9, 0.95, 1e-8, 0.1);
    auto optimizer = factory->build({{"w", w}, {"b", b}});
    for (int step = 1; step <= 6; ++step) {
      double lr = 0.01 * step / 6.0;  // as a warmup would pass it
      w.mutable_grad() = make_grad(w, step);
      b.mutable_grad() = make_grad(b, 10 + step);
      ref_w.update(w.grad(), lr);
      ref_b.update(b.grad(), lr);
      optimizer->step(lr);
    }
    CHECK(ref_w.max_abs_diff(w) < 1e-6);
    CHECK(ref_b.max_abs_diff(b) < 1e-6);
    // The parameters really moved (a no-op optimizer would fail above, but say so).
    CHECK(max_abs_diff(w, make_param({4, 3}, 1)) > 1e-3);
  }
}

TEST_CASE("AdamW leaves parameters without a gradient untouched and does not advance their step") {
  auto factory = adamw_factory(kOptions);
  at::Tensor always = make_param({5}, 3);
  at::Tensor sometimes = make_param({2, 2}, 4);
  at::Tensor never = make_param({3}, 5);
  at::Tensor never_initial = never.detach().clone();
  ReferenceAdamW ref_always(always, 0.9, 0.95, 1e-8, 0.1), ref_sometimes(sometimes, 0.9, 0.95, 1e-8, 0.1);
  auto optimizer = factory->build({{"always", always}, {"sometimes", sometimes}, {"never", never}});
  for (int step = 1; step <= 5; ++step) {
    always.mutable_grad() = make_grad(always, step);
    ref_always.update(always.grad(), 0.01);
    if (step % 2 == 1) {
      sometimes.mutable_grad() = make_grad(sometimes, 20 + step);
      ref_sometimes.update(sometimes.grad(), 0.01);
    }
    optimizer->step(0.01);
    optimizer->zero_grad();
    CHECK_FALSE(always.grad().defined());
  }
  auto state = optimizer->state_tensors();
  CHECK(state.at("always.step").item<double>() == 5);
  CHECK(state.at("sometimes.step").item<double>() == 3);
  CHECK(state.at("never.step").item<double>() == 0);
  CHECK(torch::equal(never.detach(), never_initial));  // not even weight decay
  CHECK(state.at("never.exp_avg").abs().sum().item<double>() == 0);
  // The skipped steps use the parameter's own bias correction (t = 1, 2, 3).
  CHECK(ref_sometimes.max_abs_diff(sometimes) < 1e-6);
  CHECK(ref_always.max_abs_diff(always) < 1e-6);
}

TEST_CASE("AdamW agrees with LibTorch's torch::optim::AdamW within 1e-6") {
  auto factory = adamw_factory("lr: 0.003\nbeta1: 0.8\nbeta2: 0.99\neps: 1.0e-6\nweight_decay: 0.05\n");
  CHECK(factory->base_lr() == doctest::Approx(0.003));
  at::Tensor ours_w = make_param({8, 4}, 6), ours_b = make_param({4}, 7);
  at::Tensor theirs_w = make_param({8, 4}, 6), theirs_b = make_param({4}, 7);
  auto optimizer = factory->build({{"w", ours_w}, {"b", ours_b}});
  torch::optim::AdamW reference({theirs_w, theirs_b}, torch::optim::AdamWOptions(0.003)
                                                          .betas(std::make_tuple(0.8, 0.99))
                                                          .eps(1e-6)
                                                          .weight_decay(0.05));
  for (int step = 1; step <= 8; ++step) {
    ours_w.mutable_grad() = make_grad(ours_w, step);
    ours_b.mutable_grad() = make_grad(ours_b, 50 + step);
    theirs_w.mutable_grad() = make_grad(theirs_w, step);
    theirs_b.mutable_grad() = make_grad(theirs_b, 50 + step);
    optimizer->step(0.003);
    reference.step();
  }
  CHECK(max_abs_diff(ours_w, theirs_w) < 1e-6);
  CHECK(max_abs_diff(ours_b, theirs_b) < 1e-6);
  auto state = optimizer->state_tensors();
  auto& theirs_state = static_cast<torch::optim::AdamWParamState&>(
      *reference.state().at(theirs_w.unsafeGetTensorImpl()));
  CHECK(max_abs_diff(state.at("w.exp_avg"), theirs_state.exp_avg()) < 1e-6);
  CHECK(max_abs_diff(state.at("w.exp_avg_sq"), theirs_state.exp_avg_sq()) < 1e-6);
  CHECK(state.at("w.step").item<double>() == theirs_state.step());
}

TEST_CASE("AdamW's foreach and for-loop implementations agree bit for bit") {
  auto foreach = adamw_factory(std::string(kOptions) + "implementation: foreach\n");
  auto loop = adamw_factory(std::string(kOptions) + "implementation: for-loop\n");
  at::Tensor a1 = make_param({6, 5}, 8), a2 = make_param({7}, 9, at::kDouble);
  at::Tensor b1 = make_param({6, 5}, 8), b2 = make_param({7}, 9, at::kDouble);
  auto first = foreach->build({{"x", a1}, {"y", a2}});
  auto second = loop->build({{"x", b1}, {"y", b2}});
  for (int step = 1; step <= 4; ++step) {
    a1.mutable_grad() = make_grad(a1, step);
    b1.mutable_grad() = make_grad(b1, step);
    if (step != 2) {
      a2.mutable_grad() = make_grad(a2, 30 + step);
      b2.mutable_grad() = make_grad(b2, 30 + step);
    }
    first->step(0.01);
    second->step(0.01);
    first->zero_grad();
    second->zero_grad();
  }
  CHECK(torch::equal(a1, b1));
  CHECK(torch::equal(a2, b2));
}

TEST_CASE("AdamW's fused implementation (ATen's _fused_adamw_) agrees with foreach within 1e-6, fp32 and fp64, "
          "parameters of one group at different step counts included") {
  auto foreach = adamw_factory(std::string(kOptions) + "implementation: foreach\n");
  auto fused = adamw_factory(std::string(kOptions) + "implementation: fused\n");
  at::Tensor a1 = make_param({6, 5}, 8), a2 = make_param({7}, 9, at::kDouble), a3 = make_param({4}, 10);
  at::Tensor b1 = make_param({6, 5}, 8), b2 = make_param({7}, 9, at::kDouble), b3 = make_param({4}, 10);
  auto first = foreach->build({{"x", a1}, {"y", a2}, {"z", a3}});
  auto second = fused->build({{"x", b1}, {"y", b2}, {"z", b3}});
  for (int step = 1; step <= 5; ++step) {
    a1.mutable_grad() = make_grad(a1, step);
    b1.mutable_grad() = make_grad(b1, step);
    if (step != 3) {  // a parameter without a gradient keeps its step count in both
      a2.mutable_grad() = make_grad(a2, 30 + step);
      b2.mutable_grad() = make_grad(b2, 30 + step);
    }
    // z shares x's device and dtype (one fused call, one step tensor per
    // count): from step 3 on the two are a count apart.
    if (step != 2) {
      a3.mutable_grad() = make_grad(a3, 60 + step);
      b3.mutable_grad() = make_grad(b3, 60 + step);
    }
    first->step(0.01 * step);
    second->step(0.01 * step);
    first->zero_grad();
    second->zero_grad();
  }
  CHECK(max_abs_diff(a1, b1) < 1e-6);
  CHECK(max_abs_diff(a2, b2) < 1e-12);
  CHECK(max_abs_diff(a3, b3) < 1e-6);
  CHECK(second->state_tensors().at("z.step").item<double>() == 4);
  CHECK(max_abs_diff(first->state_tensors().at("x.exp_avg_sq"), second->state_tensors().at("x.exp_avg_sq")) < 1e-6);
  CHECK(second->state_tensors().at("y.step").item<double>() == 4);
  CHECK_FALSE(torch::equal(a1, make_param({6, 5}, 8)));  // it did move

  // A count loaded in place (a checkpoint) reaches the fused kernel's
  // device copy of it: the next update uses step 101's bias corrections.
  for (auto* optimizer : {first.get(), second.get()}) optimizer->state_tensors().at("x.step").fill_(100);
  a1.mutable_grad() = make_grad(a1, 6);
  b1.mutable_grad() = make_grad(b1, 6);
  first->step(0.05);
  second->step(0.05);
  CHECK(max_abs_diff(a1, b1) < 1e-6);
  CHECK(second->state_tensors().at("x.step").item<double>() == 101);
}

TEST_CASE("AdamW allocates its state eagerly: zeros shaped like each parameter, a 0-dim CPU step") {
  auto factory = adamw_factory(kOptions);
  at::Tensor w = make_param({3, 2}, 10);
  at::Tensor h = make_param({4}, 11, at::kBFloat16);
  auto optimizer = factory->build({{"layers.0.w", w}, {"h", h}});
  auto state = optimizer->state_tensors();
  CHECK(state.size() == 6);
  for (const auto& [name, param] : std::map<std::string, at::Tensor>{{"layers.0.w", w}, {"h", h}}) {
    CAPTURE(name);
    for (const char* moment : {".exp_avg", ".exp_avg_sq"}) {
      REQUIRE(state.count(name + moment) == 1);
      const at::Tensor& tensor = state.at(name + moment);
      CHECK(tensor.sizes().vec() == param.sizes().vec());
      CHECK((tensor.scalar_type() == param.scalar_type()));
      CHECK((tensor.device() == param.device()));
      CHECK(tensor.abs().sum().item<double>() == 0);
    }
    REQUIRE(state.count(name + ".step") == 1);
    const at::Tensor& step = state.at(name + ".step");
    CHECK(step.dim() == 0);
    CHECK(step.device().is_cpu());
    CHECK((step.scalar_type() == at::kDouble || step.scalar_type() == at::kLong));
  }
}

TEST_CASE("AdamW's state tensors alias the real state: a checkpoint loaded in place resumes exactly") {
  auto factory = adamw_factory(kOptions);
  at::Tensor original = make_param({5, 3}, 12);
  auto first = factory->build({{"w", original}});
  for (int step = 1; step <= 3; ++step) {
    original.mutable_grad() = make_grad(original, step);
    first->step(0.01);
  }
  // "Save": copies of the parameter and of every state tensor after step 3.
  at::Tensor saved_param = original.detach().clone();
  std::map<std::string, at::Tensor> saved;
  for (const auto& [key, tensor] : first->state_tensors()) saved[key] = tensor.clone();
  for (int step = 4; step <= 5; ++step) {
    original.mutable_grad() = make_grad(original, step);
    first->step(0.01);
  }

  // "Load" into a fresh optimizer before its first step, through state_tensors().
  at::Tensor resumed = saved_param.clone().set_requires_grad(true);
  auto second = factory->build({{"w", resumed}});
  {
    torch::NoGradGuard no_grad;
    for (auto& [key, tensor] : second->state_tensors()) tensor.copy_(saved.at(key));
  }
  at::Tensor fresh = saved_param.clone().set_requires_grad(true);
  auto third = factory->build({{"w", fresh}});  // same params, no state loaded
  for (int step = 4; step <= 5; ++step) {
    resumed.mutable_grad() = make_grad(resumed, step);
    fresh.mutable_grad() = make_grad(fresh, step);
    second->step(0.01);
    third->step(0.01);
  }
  CHECK(torch::equal(resumed, original));
  CHECK(second->state_tensors().at("w.step").item<double>() == 5);
  CHECK(max_abs_diff(fresh, original) > 1e-4);  // the loaded state mattered

  // Writing the step counter alone changes the bias correction of the next update.
  at::Tensor p1 = make_param({4}, 13), p2 = make_param({4}, 13);
  auto o1 = factory->build({{"p", p1}});
  auto o2 = factory->build({{"p", p2}});
  o2->state_tensors().at("p.step").fill_(100);
  p1.mutable_grad() = make_grad(p1, 1);
  p2.mutable_grad() = make_grad(p2, 1);
  o1->step(0.01);
  o2->step(0.01);
  CHECK(o2->state_tensors().at("p.step").item<double>() == 101);
  CHECK(max_abs_diff(p1, p2) > 1e-4);
}

TEST_CASE("AdamW keeps bf16 parameters and state in bf16 and stays within bf16 tolerance of fp32") {
  auto factory = adamw_factory(kOptions);
  at::Tensor full = make_param({64}, 14);
  at::Tensor half = full.detach().to(at::kBFloat16).set_requires_grad(true);
  auto o_full = factory->build({{"p", full}});
  auto o_half = factory->build({{"p", half}});
  for (int step = 1; step <= 4; ++step) {
    full.mutable_grad() = make_grad(full, step);
    half.mutable_grad() = full.grad().to(at::kBFloat16);
    o_full->step(0.01);
    o_half->step(0.01);
  }
  CHECK((half.scalar_type() == at::kBFloat16));
  CHECK((o_half->state_tensors().at("p.exp_avg_sq").scalar_type() == at::kBFloat16));
  CHECK(max_abs_diff(full, half) < 2e-2);
}

TEST_CASE("adamw options: TorchTitan defaults, documented, validated with the key in the error") {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("{}", "test.yaml");
  auto factory = titan::PluginRegistry::instance().create_optimizer("adamw", context);
  CHECK(factory->base_lr() == doctest::Approx(8e-4));
  std::vector<std::string> keys;
  for (const auto& doc : context.options.documented()) keys.push_back(doc.key);
  for (const char* key : {"lr", "eps", "weight_decay", "beta1", "beta2", "implementation"}) {
    CAPTURE(key);
    CHECK(std::find(keys.begin(), keys.end(), key) != keys.end());
  }
  CHECK_NOTHROW(context.options.check_unknown_keys());

  titan::PluginContext typo;
  typo.options = titan::ConfigNode::parse("lr: 0.001\nweight_decy: 0.1\n", "test.yaml");
  titan::PluginRegistry::instance().create_optimizer("adamw", typo);
  CHECK_THROWS_WITH_AS(typo.options.check_unknown_keys(), doctest::Contains("weight_decy"), titan::ConfigError);

  const std::pair<const char*, const char*> bad[] = {
      {"lr: -0.1\n", "lr"},           {"eps: -1.0\n", "eps"},
      {"weight_decay: -0.5\n", "weight_decay"}, {"beta1: 1.0\n", "beta1"},
      {"beta2: -0.1\n", "beta2"},     {"implementation: turbo\n", "implementation"},
      {"lr: fast\n", "lr"}};
  for (const auto& [yaml, key] : bad) {
    CAPTURE(yaml);
    CHECK_THROWS_WITH_AS(adamw_factory(yaml), doctest::Contains(key), titan::ConfigError);
    CHECK_THROWS_WITH_AS(adamw_factory(yaml), doctest::Contains("test.yaml:1:"), titan::ConfigError);
  }
}

TEST_CASE("AdamW refuses a gradient whose shape no longer matches its state, and changes nothing") {
  auto factory = adamw_factory(kOptions);
  at::Tensor kept = make_param({3}, 15);
  at::Tensor resharded = make_param({4, 2}, 16);
  auto optimizer = factory->build({{"kept", kept}, {"resharded", resharded}});
  at::Tensor kept_before = kept.detach().clone();
  resharded.set_data(torch::zeros({2, 2}));  // as if sharded after the optimizer was built
  kept.mutable_grad() = make_grad(kept, 1);
  resharded.mutable_grad() = torch::ones({2, 2});
  CHECK_THROWS_WITH_AS(optimizer->step(0.01), doctest::Contains("resharded"), titan::Error);
  CHECK(torch::equal(kept.detach(), kept_before));
  CHECK(optimizer->state_tensors().at("kept.step").item<double>() == 0);
}
