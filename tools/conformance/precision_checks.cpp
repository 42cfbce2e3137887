// Mixed precision as FSDP2 does it, on one process, through the trainer's
// step: float32 master parameters; the policy's converted model computes in
// param_dtype, and its gradients are rounded through reduce_dtype before the
// float32 SGD update of the masters, which are copied back into it.
#include "precision_checks.h"

#include <ATen/ATen.h>
#include <torch/utils.h>
#include <torch/ordered_dict.h>

#include <cmath>

#include "training_fixture.h"
#include "titan/error.hpp"
#include "titan/model_builder.hpp"
#include "titan/plugin.hpp"
#include "titan/precision.hpp"
#include "titan/registry.hpp"

namespace titan::conformance {

namespace {

CheckResult precision_row(const std::string& name, double measured, double limit, const std::string& detail) {
  return {"precision." + name, measured <= limit, false, measured, limit, detail};
}

// The fixture's model after the policy's module conversion, its
// parameters in param_dtype.
std::shared_ptr<CausalLM> converted_model(const TrainingFixture& fixture, PrecisionPolicy& policy) {
  // The trainer's own path: meta, the policy's conversion, materialized.
  std::shared_ptr<CausalLM> model =
      build_model(*fixture.spec, {}, &policy, ParallelizeContext{*fixture.spec, c10::Device(c10::kCPU)});
  {
    torch::NoGradGuard no_grad;
    for (auto& param : model->parameters()) {
      if (param.is_floating_point()) param.set_data(param.to(policy.param_dtype()));
    }
  }
  model->init_buffers();
  model->train();
  return model;
}

// FSDP2's mixed precision as an optimizer over the converted model: its
// gradients rounded through reduce_dtype into the float32 master
// parameters, SGD there, and the masters copied back in param_dtype.
class MasterWeightSgd : public Optimizer {
 public:
  MasterWeightSgd(CausalLM& master, CausalLM& compute, c10::ScalarType reduce_dtype)
      : master_(master.named_parameters()), compute_(compute.named_parameters()), reduce_dtype_(reduce_dtype) {
    for (const auto& item : compute_) {
      if (!master_.find(item.key())) throw Error("precision: convert() renamed or added parameter '" + item.key() + "'");
    }
    copy_into_compute();
  }
  void step(double lr) override {
    std::vector<at::Tensor> updated;
    for (auto& item : compute_) {
      const at::Tensor& grad = item.value().grad();
      if (!grad.defined()) continue;
      at::Tensor& master = master_[item.key()];
      master.mutable_grad() = grad.to(reduce_dtype_).to(at::kFloat);
      updated.push_back(master);
    }
    SgdOptimizer(updated).step(lr);
    for (auto& master : updated) master.mutable_grad().reset();
    copy_into_compute();
  }
  void zero_grad() override {
    for (auto& item : compute_) item.value().mutable_grad().reset();
  }
  std::map<std::string, at::Tensor> state_tensors() override { return {}; }

 private:
  void copy_into_compute() {
    torch::NoGradGuard no_grad;
    for (auto& item : compute_) item.value().copy_(*master_.find(item.key()));
  }

  torch::OrderedDict<std::string, at::Tensor> master_, compute_;
  c10::ScalarType reduce_dtype_;
};

double losses_under_policy(const TrainingFixture& fixture, PrecisionPolicy& policy, const ReferenceTrace& reference,
                           std::string& trace) {
  auto master = build_single_process(fixture);
  auto compute = converted_model(fixture, policy);
  // The trainer's step on the converted model, its optimizer the masters'.
  FixtureStep step_runner(*compute, nullptr, std::make_unique<MasterWeightSgd>(*master, *compute, policy.reduce_dtype()));
  double worst = 0;
  for (int64_t step = 1; step <= fixture.steps; ++step) {
    const double value = step_runner.run(fixture_windows(fixture, step), fixture.lr).loss.item<double>();
    double diff = std::isfinite(value) ? relative_difference(value, reference.losses[step - 1]) : INFINITY;
    worst = std::max(worst, diff);
    trace += (step > 1 ? ", " : "") + std::to_string(value) + " vs " + std::to_string(reference.losses[step - 1]);
  }
  return worst;
}

}  // namespace

CheckResults check_precision(const std::string& plugin, const ConfigNode& declaration) {
  TrainingFixture fixture = load_fixture(declaration);
  const ConfigNode section = declaration.child("precision");
  // The base options, then each `variants:` entry (e.g. a converter's other
  // recipes), whose rows end in `:<name>`.
  std::vector<std::pair<std::string, ConfigNode>> option_sets{{"", section.child("options")}};
  for (const ConfigNode& variant : section.children("variants")) {
    option_sets.emplace_back(variant.require<std::string>("name", "the variant's name, shown in its rows"),
                             variant.child("options"));
  }
  const std::string name = PluginRegistry::instance().load(plugin).name;
  const ReferenceTrace reference = train_reference(fixture);
  CheckResults results;
  for (const auto& [variant, options] : option_sets) {
    const std::string suffix = variant.empty() ? "" : ":" + variant;
    PluginContext context;
    context.options = options;
    context.training_steps = fixture.steps;
    auto policy = PluginRegistry::instance().create_precision(name, context);
    c10::ScalarType param = policy->param_dtype(), reduce = policy->reduce_dtype();
    bool supported = trainer_supports_dtype(param) && trainer_supports_dtype(reduce);
    results.push_back(precision_row("dtypes" + suffix, supported ? 0 : 1, 0,
                          std::string("param ") + c10::toString(param) + ", reduce " + c10::toString(reduce) +
                              " (the trainer supports Float and BFloat16)"));
    if (!supported) continue;
    double tolerance = policy->loss_tolerance();
    std::string trace;
    double worst = losses_under_policy(fixture, *policy, reference, trace);
    results.push_back(precision_row("loss" + suffix, worst, std::isfinite(tolerance) && tolerance >= 0 ? tolerance : -1,
                          "max relative loss difference to float32 over " + std::to_string(fixture.steps) +
                              " SGD steps vs the policy's loss_tolerance(): " + trace));
  }
  return results;
}

}  // namespace titan::conformance
