// Optimizer checks on a few float32 parameters of odd shapes, a fixed seed,
// three steps (so momentum and bias correction are exercised).
#include "optimizer_checks.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "reference_rules.h"
#include "titan/optimizer.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"

namespace titan::conformance {

namespace {

constexpr int kSteps = 3;

std::unique_ptr<Optimizer> build(const std::string& plugin, const ConfigNode& options,
                                 const std::vector<NamedParameter>& params, double* lr) {
  PluginContext context;
  context.options = options;
  auto factory = PluginRegistry::instance().create_optimizer(plugin, context);
  *lr = factory->base_lr();
  return factory->build(params);
}

std::vector<NamedParameter> fresh_params(uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<NamedParameter> out;
  const std::vector<std::vector<int64_t>> shapes = {{7, 5}, {5}, {3, 2, 4}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor t = at::normal(0.0, 1.0, shapes[i], gen, at::kDouble).to(at::kFloat).set_requires_grad(true);
    out.push_back({"p" + std::to_string(i), t});
  }
  return out;
}

CheckResult reference_step(const std::string& plugin, const ConfigNode& declaration) {
  CheckResult result;
  result.name = "optimizer.reference_step";
  ConfigNode options = declaration.child("options");
  result.limit = declaration.get<double>("tolerance", 1e-6, "max |plugin - reference| after the steps");
  auto reference = make_reference_rule(declaration, options);
  auto params = fresh_params(1);
  double lr = 0;
  auto optimizer = build(plugin, options, params, &lr);
  std::vector<at::Tensor> ref;
  for (const auto& p : params) ref.push_back(p.tensor.detach().to(at::kDouble));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<at::Tensor> grads;
    for (auto& p : params) {
      at::Tensor g = at::normal(0.0, 1.0, p.tensor.sizes(), gen, at::kDouble);
      p.tensor.mutable_grad() = g.to(at::kFloat);
      grads.push_back(g.to(at::kFloat).to(at::kDouble));  // the gradient the plugin sees
    }
    reference->step(ref, grads, lr);
    optimizer->step(lr);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    double diff = (params[i].tensor.detach().to(at::kDouble) - ref[i]).abs().max().item<double>();
    result.measured = std::max(result.measured, diff);
  }
  result.passed = result.measured <= result.limit;
  result.detail = std::to_string(kSteps) + " steps, lr " + std::to_string(lr) + ", rule " +
                  declaration.require<std::string>("rule");
  return result;
}

CheckResult state_like_params(const std::string& plugin, const ConfigNode& declaration) {
  CheckResult result;
  result.name = "optimizer.state_like_params";
  auto params = fresh_params(3);
  double lr = 0;
  auto optimizer = build(plugin, declaration.child("options"), params, &lr);
  // After a step: an optimizer may create its state lazily.
  for (auto& p : params) p.tensor.mutable_grad() = at::ones_like(p.tensor);
  optimizer->step(lr);
  int bad = 0;
  std::map<std::string, int> states_of;
  for (const auto& [key, tensor] : optimizer->state_tensors()) {
    auto owner = std::find_if(params.begin(), params.end(),
                              [&key = key](const NamedParameter& p) { return key.rfind(p.name + ".", 0) == 0; });
    // 0-dim tensors (step counters) are per parameter, not per element.
    bool ok = owner != params.end() && (tensor.dim() == 0 || tensor.sizes().equals(owner->tensor.sizes()));
    if (!ok) {
      ++bad;
      result.detail += (result.detail.empty() ? "" : ", ") + key;
    }
    if (owner != params.end()) ++states_of[owner->name];
  }
  if (bad) result.detail = "not '<param>.<state>' shaped like the param (or 0-dim): " + result.detail;
  // Rules with moments keep some per parameter; a checkpoint would otherwise lose them.
  const std::string rule = declaration.require<std::string>("rule");
  if (rule == "adamw" || rule == "lion" || rule == "muon") {
    for (const auto& p : params) {
      if (states_of[p.name] > 0) continue;
      ++bad;
      result.detail += std::string(result.detail.empty() ? "" : "; ") + "no state tensor for '" + p.name +
                       "' after a step (a " + rule + " rule keeps moments per parameter)";
    }
  }
  result.measured = bad;
  result.passed = bad == 0;
  if (!bad) result.detail = "every state tensor is '<param>.<state>', shaped like its parameter or 0-dim";
  return result;
}

CheckResult no_grad_untouched(const std::string& plugin, const ConfigNode& declaration) {
  CheckResult result;
  result.name = "optimizer.no_grad_untouched";
  auto params = fresh_params(4);
  double lr = 0;
  auto optimizer = build(plugin, declaration.child("options"), params, &lr);
  at::Tensor before = params[1].tensor.detach().clone();
  params[0].tensor.mutable_grad() = at::ones_like(params[0].tensor);
  optimizer->step(lr);
  result.measured = (params[1].tensor.detach() - before).abs().max().item<double>();
  result.passed = result.measured == 0;
  result.detail = "a parameter without a gradient must not move (weight decay included)";
  return result;
}

// Rows [begin, begin + length) of every parameter, as FSDP gives one rank.
std::vector<NamedParameter> row_pieces(const std::vector<NamedParameter>& whole, int piece, int pieces) {
  std::vector<NamedParameter> out;
  for (const auto& p : whole) {
    int64_t rows = p.tensor.size(0), per = (rows + pieces - 1) / pieces;
    int64_t begin = std::min(rows, per * piece), length = std::min(rows, begin + per) - begin;
    at::Tensor local = p.tensor.detach().narrow(0, begin, length).clone().set_requires_grad(true);
    out.push_back({p.name, local});
  }
  return out;
}

// Under FSDP each rank's optimizer sees only its rows of every parameter,
// under the whole parameter's name. An elementwise rule must then give the
// rows of the unsharded run, and its state must be those rows of the whole
// state (what a resharded checkpoint relies on).
CheckResult sharded_like_whole(const std::string& plugin, const ConfigNode& declaration) {
  CheckResult result;
  result.name = "optimizer.sharded_like_whole";
  result.limit = declaration.get<double>("tolerance", 1e-6, "max |plugin - reference| after the steps");
  if (!declaration.get<bool>("elementwise", true,
                             "whether the rule acts on each element alone (false: sharded_like_whole is skipped)")) {
    result.skipped = true;
    result.detail = "the declaration says the rule is not elementwise: it cannot run on FSDP's row shards";
    return result;
  }
  constexpr int kPieces = 2;
  auto whole = fresh_params(5);
  double lr = 0;
  auto whole_optimizer = build(plugin, declaration.child("options"), whole, &lr);
  std::vector<std::vector<NamedParameter>> pieces;
  std::vector<std::unique_ptr<Optimizer>> piece_optimizers;
  for (int piece = 0; piece < kPieces; ++piece) {
    pieces.push_back(row_pieces(whole, piece, kPieces));
    piece_optimizers.push_back(build(plugin, declaration.child("options"), pieces.back(), &lr));
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < whole.size(); ++i) {
      at::Tensor grad = at::normal(0.0, 1.0, whole[i].tensor.sizes(), gen, at::kDouble).to(at::kFloat);
      whole[i].tensor.mutable_grad() = grad;
      int64_t begin = 0;
      for (auto& piece : pieces) {
        int64_t rows = piece[i].tensor.size(0);
        piece[i].tensor.mutable_grad() = grad.narrow(0, begin, rows).clone();
        begin += rows;
      }
    }
    whole_optimizer->step(lr);
    for (auto& optimizer : piece_optimizers) optimizer->step(lr);
  }
  auto concat = [](const std::vector<at::Tensor>& parts) {
    return parts.front().dim() == 0 ? parts.front() : at::cat(parts, 0);
  };
  std::string worst;
  auto compare = [&](const std::string& what, const at::Tensor& expected, const at::Tensor& got) {
    double diff = expected.sizes().equals(got.sizes())
                      ? (expected.to(at::kDouble) - got.to(at::kDouble)).abs().max().item<double>()
                      : INFINITY;
    if (diff > result.measured || worst.empty()) result.measured = diff, worst = what;
  };
  for (size_t i = 0; i < whole.size(); ++i) {
    std::vector<at::Tensor> parts;
    for (const auto& piece : pieces) parts.push_back(piece[i].tensor.detach());
    compare(whole[i].name, whole[i].tensor.detach(), concat(parts));
  }
  std::vector<std::map<std::string, at::Tensor>> piece_states;
  for (auto& optimizer : piece_optimizers) piece_states.push_back(optimizer->state_tensors());
  for (const auto& [key, tensor] : whole_optimizer->state_tensors()) {
    std::vector<at::Tensor> parts;
    for (const auto& states : piece_states) {
      auto found = states.find(key);
      if (found != states.end()) parts.push_back(found->second.detach());
    }
    if (parts.size() != kPieces) {
      result.measured = INFINITY, worst = key + " (missing from a shard's optimizer)";
      continue;
    }
    compare(key, tensor.detach(), concat(parts));
  }
  result.passed = result.measured <= result.limit;
  result.detail = std::to_string(kSteps) + " steps on " + std::to_string(kPieces) +
                  " row shards vs whole parameters (params and state), worst " + worst;
  return result;
}

}  // namespace

CheckResults check_optimizer(const std::string& plugin, const ConfigNode& declaration) {
  at::NoGradGuard no_grad;
  return {reference_step(plugin, declaration), state_like_params(plugin, declaration),
          sharded_like_whole(plugin, declaration), no_grad_untouched(plugin, declaration)};
}

}  // namespace titan::conformance
