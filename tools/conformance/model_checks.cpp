// Each check builds what it needs from the fixture's spec, so one broken
// property fails one named row and the others still report.
#include "model_checks.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <cmath>

#include "training_fixture.h"
#include "titan/peak_memory.hpp"

namespace titan::conformance {

namespace {

struct ModelLimits {
  double meta_bytes = 0;
  double initial_loss = 0;
  int64_t learn_steps = 0;
  double learn_lr = 0;
  double learn_ratio = 0;
};

ModelLimits read_limits(const ConfigNode& declaration) {
  ConfigNode section = declaration.child("model_checks");
  ModelLimits out;
  out.meta_bytes = section.get<double>("meta_bytes", 0, "max CPU bytes allocated while building on meta");
  out.initial_loss = section.get<double>("initial_loss", 0.2, "max |loss - ln(vocab)| / ln(vocab) of a fresh model");
  out.learn_steps = section.get<int64_t>("learn_steps", 5, "SGD steps on one repeated batch");
  out.learn_lr = section.get<double>("learn_lr", 0.5, "their learning rate");
  out.learn_ratio = section.get<double>("learn_ratio", 0.9, "max last loss / first loss after those steps");
  if (out.learn_steps < 1) section.fail("learn_steps", "expected an integer >= 1");
  if (!(out.learn_lr > 0)) section.fail("learn_lr", "expected a positive number");
  return out;
}

CheckResult model_row(const std::string& name, double measured, double limit, const std::string& detail) {
  return {"model." + name, measured <= limit, false, measured, limit, detail};
}

using Values = std::map<std::string, at::Tensor>;

// The peak of CPU bytes while the spec builds the module on meta.
CheckResult meta_build(const TrainingFixture& fixture, const ModelLimits& limits) {
  std::shared_ptr<CausalLM> model;
  int64_t peak = peak_cpu_bytes_during([&] { model = fixture.spec->build(c10::Device(c10::kMeta)); });
  int64_t on_cpu = 0;
  for (const auto& tensor : model->parameters()) on_cpu += tensor.device().is_meta() ? 0 : 1;
  std::string detail = "peak CPU bytes while building on meta";
  if (on_cpu) detail += "; " + std::to_string(on_cpu) + " parameters are not on meta";
  return model_row("meta_build", on_cpu ? INFINITY : static_cast<double>(peak), limits.meta_bytes, detail);
}

CheckResult forward_shape(CausalLM& model, const TrainingFixture& fixture) {
  at::Tensor tokens = fixture_windows(fixture, 1).narrow(1, 0, fixture.seq_len);
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model.run(tokens);
  }
  std::vector<int64_t> expected = {fixture.batch, fixture.seq_len, fixture.spec->vocab_size()};
  bool ok = logits.sizes().vec() == expected;
  return model_row("forward_shape", ok ? 0 : 1, 0,
             "logits " + c10::str(logits.sizes()) + ", expected [batch, seq, vocab] = " + c10::str(expected));
}

// Same seed twice: identical; another seed: every parameter that is not a
// constant (norm weights are ones whatever the seed) differs.
void init_seeds(const TrainingFixture& fixture, const Values& first, CheckResults& rows) {
  Values again = parameter_values(*build_single_process(fixture));
  double worst = 0;
  for (const auto& [name, tensor] : first) worst = std::max(worst, (tensor - again.at(name)).abs().max().item<double>());
  rows.push_back(model_row("init_deterministic", worst, 0, "max |difference| between two inits with seed " +
                                                         std::to_string(fixture.seed)));
  Values other = parameter_values(*build_single_process(fixture, fixture.seed + 1));
  int same = 0;
  std::string first_same;
  for (const auto& [name, tensor] : first) {
    bool constant = tensor.numel() < 2 || (tensor == tensor.flatten()[0]).all().item<bool>();
    if (!constant && tensor.equal(other.at(name)) && same++ == 0) first_same = name;
  }
  rows.push_back(model_row("init_seed_changes_values", same, 0,
                     same ? "unchanged by another seed: " + first_same : "every non-constant parameter changes"));
}

// init_parameter of each parameter alone, in reverse order, after the
// global generator was disturbed, equals the whole-model init: values
// depend only on (seed, name), as sharded init on many ranks requires.
CheckResult init_independent(CausalLM& model, const Values& first, uint64_t seed) {
  at::manual_seed(seed + 12345);
  at::randn({97});
  auto items = model.named_parameters();
  double worst = 0;
  std::string worst_name;
  for (auto it = items.end(); it != items.begin();) {
    --it;
    at::Tensor values = at::empty(it->value().sizes(), at::kFloat);
    model.init_parameter(it->key(), values, seed);
    double diff = (values - first.at(it->key()).to(at::kFloat)).abs().max().item<double>();
    if (diff > worst || worst_name.empty()) worst = diff, worst_name = it->key();
  }
  return model_row("init_order_independent", worst, 0,
             "max |init_parameter alone, reverse order - init_weights|, worst " + worst_name);
}

CheckResult num_params(CausalLM& model, const TrainingFixture& fixture) {
  int64_t counted = 0;
  for (const auto& tensor : model.parameters()) counted += tensor.numel();
  int64_t declared = fixture.spec->num_params();
  return model_row("num_params", std::abs(static_cast<double>(declared - counted)), 0,
             "num_params() " + std::to_string(declared) + ", parameters hold " + std::to_string(counted));
}

// The first step of a fresh model: the loss near ln(vocab) (a sane init
// predicts nothing yet) and a finite gradient on every trainable parameter.
class FiniteGradients : public StepObserver {
 public:
  void gradients_ready(CausalLM& model) override {
    for (const auto& item : model.named_parameters()) {
      if (!item.value().requires_grad()) continue;
      const at::Tensor& grad = item.value().grad();
      std::string problem = !grad.defined()                    ? "no gradient"
                            : !grad.isfinite().all().item<bool>() ? "non-finite gradient"
                                                                 : "";
      if (!problem.empty() && bad++ == 0) first_bad = item.key() + ": " + problem;
    }
  }
  int bad = 0;
  std::string first_bad;
};

void fresh_step(CausalLM& model, const TrainingFixture& fixture, const ModelLimits& limits, CheckResults& rows) {
  FiniteGradients check;
  const double value = FixtureStep(model, nullptr).run(fixture_windows(fixture, 1), fixture.lr, &check).loss.item<double>();
  rows.push_back(model_row("gradients_finite", check.bad, 0,
                           check.bad ? check.first_bad : "every trainable parameter has a finite gradient"));
  double uniform = std::log(static_cast<double>(fixture.spec->vocab_size()));
  rows.push_back(model_row("initial_loss", std::isfinite(value) ? std::abs(value - uniform) / uniform : INFINITY,
                     limits.initial_loss,
                     "fresh loss " + std::to_string(value) + " vs ln(vocab) " + std::to_string(uniform)));
}

CheckResult learns(const TrainingFixture& fixture, const ModelLimits& limits) {
  auto model = build_single_process(fixture);
  FixtureStep step_runner(*model, nullptr);
  at::Tensor windows = fixture_windows(fixture, 1);
  double first = 0;
  for (int64_t step = 1; step <= limits.learn_steps; ++step) {
    const double loss = step_runner.run(windows, limits.learn_lr).loss.item<double>();
    if (step == 1) first = loss;
  }
  torch::NoGradGuard no_grad;
  const double last = next_token_loss(*model, windows).item<double>();
  double ratio = std::isfinite(last) && first > 0 ? last / first : INFINITY;
  return model_row("learns", ratio, limits.learn_ratio,
             "loss " + std::to_string(first) + " -> " + std::to_string(last) + " after " +
                 std::to_string(limits.learn_steps) + " SGD steps (lr " + std::to_string(limits.learn_lr) +
                 ") on one batch");
}

}  // namespace

CheckResults check_model(const std::string& plugin, const ConfigNode& declaration) {
  TrainingFixture fixture = load_fixture(declaration, plugin);
  ModelLimits limits = read_limits(declaration);
  CheckResults rows;
  rows.push_back(meta_build(fixture, limits));
  auto model = build_single_process(fixture);
  Values first = parameter_values(*model);
  rows.push_back(forward_shape(*model, fixture));
  init_seeds(fixture, first, rows);
  rows.push_back(init_independent(*model, first, fixture.seed));
  rows.push_back(num_params(*model, fixture));
  fresh_step(*model, fixture, limits, rows);
  rows.push_back(learns(fixture, limits));
  return rows;
}

}  // namespace titan::conformance
