#include "training_fixture.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <torch/utils.h>

#include <cmath>

#include "titan/model_builder.hpp"
#include "titan/compat.hpp"
#include "titan/moe.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/microbatch_runner.hpp"

namespace titan::conformance {

TrainingFixture load_fixture(const ConfigNode& declaration, const std::string& model_under_test) {
  TrainingFixture fixture;
  ConfigNode section = declaration.child("model");
  const bool names_plugin = section.has("plugin");  // before get(), which writes the default back
  fixture.model_plugin = section.get<std::string>("plugin", "llama3", "the model plugin the checks train");
  fixture.batch = section.get<int64_t>("batch", 4, "global batch (rows), split over data-parallel ranks");
  fixture.seq_len = section.get<int64_t>("seq_len", 16, "tokens per row");
  fixture.steps = section.get<int64_t>("steps", 3, "SGD steps compared with the reference");
  fixture.lr = section.get<double>("lr", 0.05, "SGD learning rate");
  fixture.seed = static_cast<uint64_t>(section.get<int64_t>("seed", 7, "init and data seed"));
  int64_t vocab = section.get<int64_t>("vocab_size", 512, "vocabulary size given to the model");
  std::string model_name = PluginRegistry::instance().load(model_under_test.empty() ? fixture.model_plugin
                                                                                    : model_under_test).name;
  if (!model_under_test.empty() && names_plugin && fixture.model_plugin != model_name) {
    section.fail("plugin", "names '" + fixture.model_plugin + "', but the model plugin under test is '" +
                               model_name + "' (leave it out or name that plugin)");
  }
  fixture.model_plugin = model_name;
  ConfigNode options = model_name == "llama3" && !section.has("options")
                           ? ConfigNode::parse("{dim: 64, n_layers: 4, n_heads: 4, max_seq_len: 64}",
                                               "conformance default model")
                           : section.child("options");
  PluginContext context;
  context.options = options;
  fixture.spec = PluginRegistry::instance().create_model(model_name, context);
  fixture.spec->set_vocab_size(vocab);
  if (fixture.batch < 1 || fixture.seq_len < 1 || fixture.steps < 1) {
    section.fail("batch", "batch, seq_len and steps must be >= 1");
  }
  return fixture;
}

at::Tensor fixture_windows(const TrainingFixture& fixture, int64_t step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(fixture.seed * 1000003 + static_cast<uint64_t>(step));
  return at::randint(fixture.spec->vocab_size(), {fixture.batch, fixture.seq_len + 1}, generator, at::kLong);
}

std::shared_ptr<CausalLM> build_single_process(const TrainingFixture& fixture) {
  return build_single_process(fixture, fixture.seed);
}

std::shared_ptr<CausalLM> build_single_process(const TrainingFixture& fixture, uint64_t seed) {
  // The trainer's own path, with no plugin applied.
  std::shared_ptr<CausalLM> model =
      build_model(*fixture.spec, {}, nullptr, ParallelizeContext{*fixture.spec, c10::Device(c10::kCPU)});
  model->init_weights(seed);
  model->train();
  return model;
}

std::map<std::string, at::Tensor> parameter_values(CausalLM& model) {
  std::map<std::string, at::Tensor> values;
  for (const auto& item : model.named_parameters()) values[item.key()] = item.value().detach().clone();
  return values;
}

at::Tensor next_token_loss(CausalLM& model, const at::Tensor& windows) {
  int64_t length = windows.size(1) - 1;
  return model.training_loss()(model.run(windows.narrow(1, 0, length)), windows.narrow(1, 1, length));
}

void SgdOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  for (const auto& param : params_) {
    if (param.grad().defined()) param.sub_(param.grad().to(param.scalar_type()), lr);  // a handle: in-place is const
  }
}

void SgdOptimizer::zero_grad() {
  for (auto& param : params_) param.mutable_grad().reset();
}

std::map<std::string, at::Tensor> expert_biases(CausalLM& model) {
  std::map<std::string, at::Tensor> biases;
  for (const auto& [path, router] : find_routers(model)) {
    if (router->expert_bias.defined()) biases[path] = router->expert_bias.detach().clone();
  }
  return biases;
}

FixtureStep::FixtureStep(CausalLM& model, const DeviceMesh* mesh, std::unique_ptr<Optimizer> optimizer)
    : runner_(gradient_accumulation()), optimizer_(std::move(optimizer)) {
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    parts_.parameters.push_back(item.value());
    names.push_back(item.key());
  }
  if (!optimizer_) optimizer_ = std::make_unique<SgdOptimizer>(parts_.parameters);
  parts_.model = &model;
  parts_.runner = runner_.get();
  parts_.optimizer = optimizer_.get();
  parts_.mesh = mesh;
  parts_.norm_weights = norm_weights_over(mesh, model, names);
  parts_.max_norm = 0;  // measured, never clipped: SGD sees the gradients as they are
}

StepResult FixtureStep::run(const at::Tensor& windows, double lr, StepObserver* observer) {
  const int64_t length = windows.size(1) - 1;
  StepOptions options;
  options.lr = lr;
  options.log_step = true;
  options.observer = observer;
  Microbatch batch;
  batch.inputs = windows.narrow(1, 0, length);
  batch.labels = windows.narrow(1, 1, length);
  return run_training_step(parts_, {batch}, options);
}

namespace {

// Records each parameter's finalized gradient (the reference's).
class GradientRecorder : public StepObserver {
 public:
  void gradients_ready(CausalLM& model) override {
    std::map<std::string, at::Tensor> step;
    for (const auto& item : model.named_parameters()) {
      if (item.value().grad().defined()) step[item.key()] = item.value().grad().detach().clone();
    }
    steps.push_back(std::move(step));
  }
  std::vector<std::map<std::string, at::Tensor>> steps;
};

}  // namespace

ReferenceTrace train_reference(const TrainingFixture& fixture) {
  ReferenceTrace trace;
  auto model = build_single_process(fixture);
  FixtureStep step_runner(*model, nullptr);
  GradientRecorder recorder;
  at::manual_seed(fixture.seed);  // a model drawing random numbers (dropout) draws the same in every run
  for (int64_t step = 1; step <= fixture.steps; ++step) {
    StepResult result = step_runner.run(fixture_windows(fixture, step), fixture.lr, &recorder);
    trace.losses.push_back(result.loss.item<double>());
    trace.grad_norms.push_back(result.grad_norm.item<double>());
    trace.expert_biases.push_back(expert_biases(*model));  // the step hooks' load balancing is done
  }
  trace.gradients = std::move(recorder.steps);
  trace.params = parameter_values(*model);
  return trace;
}

double relative_difference(double a, double b, double floor) {
  return std::abs(a - b) / std::max(std::abs(b), floor);
}

}  // namespace titan::conformance
