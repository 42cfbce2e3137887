// Both runs start from the same fixture init and see the same tokens; the
// only difference is the microbatch split the runner drives.
#include "microbatch_runner_checks.h"

#include <ATen/ATen.h>

#include <cmath>

#include "training_fixture.h"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/microbatch_runner.hpp"

namespace titan::conformance {

namespace {

struct RunnerDeclaration {
  ConfigNode options;
  int64_t microbatches = 0;
  double loss_tolerance = 0;
  double grads_tolerance = 0;
};

RunnerDeclaration read_declaration(const ConfigNode& declaration, const TrainingFixture& fixture) {
  ConfigNode section = declaration.child("microbatch_runner");
  RunnerDeclaration out;
  out.options = section.child("options");
  out.microbatches = section.get<int64_t>("microbatches", 4, "microbatches the fixture's batch is split into");
  ConfigNode tolerance = section.child("tolerance");
  out.loss_tolerance = tolerance.get<double>("loss", 1e-5, "max relative loss difference to one whole-batch pass");
  out.grads_tolerance = tolerance.get<double>("grads", 1e-5, "max |grad - reference grad| / max |reference grad|");
  if (out.microbatches < 2 || fixture.batch % out.microbatches != 0) {
    section.fail("microbatches", "expected an integer >= 2 that divides model.batch (" +
                                     std::to_string(fixture.batch) + "), got " + std::to_string(out.microbatches));
  }
  return out;
}

CheckResult runner_row(const std::string& name, double measured, double limit, const std::string& detail) {
  return {"microbatch_runner." + name, measured <= limit, false, measured, limit, detail};
}

std::map<std::string, at::Tensor> gradients_of(CausalLM& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters()) {
    if (item.value().grad().defined()) out[item.key()] = item.value().grad().detach().clone();
  }
  return out;
}

}  // namespace

CheckResults check_microbatch_runner(const std::string& plugin, const ConfigNode& declaration) {
  TrainingFixture fixture = load_fixture(declaration);
  RunnerDeclaration declared = read_declaration(declaration, fixture);
  PluginContext context;
  context.options = declared.options;
  context.training_steps = fixture.steps;
  auto runner = PluginRegistry::instance().create_microbatch_runner(PluginRegistry::instance().load(plugin).name, context);

  at::Tensor windows = fixture_windows(fixture, 1);
  const int64_t length = fixture.seq_len;
  const int64_t rows = fixture.batch / declared.microbatches;
  // The first microbatch's rows ignore their first half of labels (-100):
  // microbatches hold uneven counts of labels that carry loss, and the step
  // must weigh them as the trainer's microbatches say (row_weights), not
  // average the microbatch means.
  at::Tensor inputs = windows.narrow(1, 0, length), labels = windows.narrow(1, 1, length).clone();
  labels.narrow(0, 0, rows).narrow(1, 0, length / 2).fill_(-100);
  auto reference_model = build_single_process(fixture);
  at::Tensor reference_loss = reference_model->loss()(reference_model->run(inputs), labels);
  reference_loss.backward();
  auto reference_grads = gradients_of(*reference_model);

  auto model = build_single_process(fixture);
  // Block 0's backward runs once per microbatch: record whether gradient
  // sync was on then, since data parallelism reads it while gradients
  // arrive (only the last microbatch's backward may sync).
  std::vector<bool> sync_seen;
  CausalLM* observed = model.get();
  model->add_block_wrapper([&sync_seen, observed](int64_t block, const at::Tensor& hidden, const BlockBody& inner) {
    at::Tensor out = inner(hidden);
    if (block == 0 && out.requires_grad()) {
      out.register_hook([&sync_seen, observed](const at::Tensor& grad) {
        sync_seen.push_back(observed->gradient_sync());
        return grad;
      });
    }
    return out;
  });
  std::vector<Microbatch> microbatches;
  const double carrying = labels.ne(-100).sum().item<double>();
  for (int64_t i = 0; i < declared.microbatches; ++i) {
    Microbatch microbatch{inputs.narrow(0, i * rows, rows), labels.narrow(0, i * rows, rows), {}, {}};
    for (int64_t row = 0; row < rows; ++row) {
      microbatch.row_weights.push_back(microbatch.labels[row].ne(-100).sum().item<double>() / carrying);
    }
    microbatches.push_back(std::move(microbatch));
  }
  at::Tensor loss = runner->forward_backward(*model, microbatches, model->loss());
  auto grads = gradients_of(*model);

  CheckResults results;
  std::string split = std::to_string(declared.microbatches) + " microbatches of " + std::to_string(rows) + " rows";
  bool scalar = loss.defined() && loss.dim() == 0 && !loss.requires_grad();
  double value = loss.defined() ? loss.item<double>() : NAN;
  double loss_diff = std::isfinite(value) ? relative_difference(value, reference_loss.item<double>()) : INFINITY;
  results.push_back(runner_row("loss", scalar ? loss_diff : INFINITY, declared.loss_tolerance,
                        scalar ? "loss " + std::to_string(value) + " vs whole batch " +
                                     std::to_string(reference_loss.item<double>()) + ", " + split
                               : "step() must return a detached 0-dim tensor"));
  double scale = 0, worst = 0;
  std::string worst_name;
  for (const auto& [name, grad] : reference_grads) scale = std::max(scale, grad.abs().max().item<double>());
  for (const auto& [name, grad] : reference_grads) {
    auto found = grads.find(name);
    double diff = found == grads.end() ? INFINITY : (found->second - grad).abs().max().item<double>();
    if (diff > worst || worst_name.empty()) worst = diff, worst_name = name;
  }
  results.push_back(runner_row("grads", worst / std::max(scale, 1e-12), declared.grads_tolerance,
                        "max |grad - whole-batch grad| / max |whole-batch grad|, worst " + worst_name));
  int wrong = 0;
  for (size_t i = 0; i < sync_seen.size(); ++i) wrong += sync_seen[i] != (i + 1 == sync_seen.size());
  if (sync_seen.size() != microbatches.size()) wrong += 1;
  std::string pattern;
  for (bool on : sync_seen) pattern += on ? '1' : '0';
  results.push_back(runner_row("gradient_sync", wrong, 0,
                        "gradient_sync() during each microbatch's backward: " + pattern + " (expected only the last on)"));
  return results;
}

}  // namespace titan::conformance
