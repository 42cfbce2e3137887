// The small training job the model-level checks share: a model plugin
// (llama3 shrunk to 4 blocks by default), fixed random tokens, and plain
// SGD, so that no optimizer can hide or cause a difference. The reference
// is the same job on one process in float32.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/config.hpp"
#include "titan/model.hpp"
#include "titan/optimizer.hpp"
#include "titan/training_step.hpp"

namespace titan::conformance {

struct TrainingFixture {
  std::unique_ptr<ModelSpec> spec;
  std::string model_plugin;
  int64_t batch = 4;  // global: split over the data-parallel ranks
  int64_t seq_len = 16;
  int64_t steps = 3;
  double lr = 0.05;
  uint64_t seed = 7;
};

// Reads the declaration's optional `model:` section: plugin (llama3), its
// options, vocab_size, batch, seq_len, steps, lr, seed. `model_under_test`
// (a model plugin's path) replaces `model.plugin`, which may then only name
// that plugin.
TrainingFixture load_fixture(const ConfigNode& declaration, const std::string& model_under_test = "");

// [batch, seq_len + 1] tokens of a step: a pure function of (seed, step).
at::Tensor fixture_windows(const TrainingFixture& fixture, int64_t step);

// The model built on one process, initialized from the fixture's seed (or
// from `seed`).
std::shared_ptr<CausalLM> build_single_process(const TrainingFixture& fixture);
std::shared_ptr<CausalLM> build_single_process(const TrainingFixture& fixture, uint64_t seed);

// A detached copy of every parameter, by name.
std::map<std::string, at::Tensor> parameter_values(CausalLM& model);

// Mean next-token cross-entropy of `windows` ([rows, seq_len + 1]).
at::Tensor next_token_loss(CausalLM& model, const at::Tensor& windows);

// The harness's optimizer: p -= lr * grad (in the parameter's dtype) for
// every parameter with a gradient; zero_grad() clears them.
class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(std::vector<at::Tensor> params) : params_(std::move(params)) {}
  void step(double lr) override;
  void zero_grad() override;
  std::map<std::string, at::Tensor> state_tensors() override { return {}; }

 private:
  std::vector<at::Tensor> params_;
};

// The fixture's steps through the trainer's own step (titan/training_step.hpp:
// forward and backward, gradient finalization, the loss over the job, the
// global norm, the model's step hooks, the optimizer) on `model`, one
// microbatch a step. `mesh` (null on one process) reduces the loss and the
// norm as the trainer's does; the optimizer is SGD unless given.
class FixtureStep {
 public:
  FixtureStep(CausalLM& model, const DeviceMesh* mesh, std::unique_ptr<Optimizer> optimizer = nullptr);
  // `windows`: this rank's rows of the step's batch ([rows, seq_len + 1]).
  StepResult run(const at::Tensor& windows, double lr, StepObserver* observer = nullptr);

 private:
  std::unique_ptr<MicrobatchRunner> runner_;
  std::unique_ptr<Optimizer> optimizer_;
  StepParts parts_;
};

// Every MoE router's expert bias by module path (routers without one left
// out), detached copies.
std::map<std::string, at::Tensor> expert_biases(CausalLM& model);

struct ReferenceTrace {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  // Per step, every parameter's gradient after finalization, by name.
  std::vector<std::map<std::string, at::Tensor>> gradients;
  std::map<std::string, at::Tensor> params;  // after the last step
  // Per step, after its load balancing (the trainer's, before the optimizer):
  // empty maps for a model without MoE routers.
  std::vector<std::map<std::string, at::Tensor>> expert_biases;
};

// The fixture's steps on one process: the reference every check compares to.
ReferenceTrace train_reference(const TrainingFixture& fixture);

// max |a - b| / max(|b|, floor): a relative difference that stays defined
// near zero.
double relative_difference(double a, double b, double floor = 1e-6);

}  // namespace titan::conformance
