// Each rank trains the fixture twice: alone (the reference) and with the
// plugin on the mesh its mesh_dims() ask for, on its data-parallel share of
// every batch. Full parameters are gathered through the layouts the plugin
// recorded, so a plugin that records wrong layouts fails too.
#include "parallelizer_checks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "training_fixture.h"
#include "worker.h"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/training_step.hpp"
#include "titan/model_builder.hpp"
#include "titan/parallelizer.hpp"
#include "titan/peak_memory.hpp"
#include "titan/placement.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"
#include "titan/world.hpp"

namespace titan::conformance {

namespace {

// A plugin the one under test needs applied with it (loss_parallel needs
// tensor_parallel), in the canonical apply order.
struct Companion {
  std::string plugin;
  ConfigNode options;
};

struct ParallelizerDeclaration {
  std::string variant;  // "" for the base options, else a `variants:` entry's name
  ConfigNode options;
  std::vector<Companion> with;
  std::vector<std::string> shards_over;
  double loss_tolerance = 0;
  double grad_norm_tolerance = 0;
  double params_tolerance = 0;
  double expert_bias_tolerance = 0;
  double param_grads_tolerance = 0;
  double memory_limit = 0;
  double activation_memory_limit = 0;
  std::vector<int64_t> world_sizes;  // empty: any
};

// `variant` 0 is the section's own options; i > 0 is `variants[i - 1]`
// (e.g. fsdp as HSDP): its name, options and world_sizes replace the base
// ones, the tolerances and sharding stay.
ParallelizerDeclaration read_declaration(const ConfigNode& declaration, size_t variant = 0) {
  ConfigNode section = declaration.child("parallelizer");
  ParallelizerDeclaration out;
  out.options = section.child("options");
  for (const ConfigNode& companion : section.children("with")) {
    out.with.push_back({companion.require<std::string>("name", "a plugin applied together with the one under test"),
                        companion.child("options")});
  }
  out.shards_over = section.get<std::vector<std::string>>(
      "shards_over", {}, "mesh dims every parameter is split along (empty: each rank holds whole parameters; \"a|b\": along a or b)");
  ConfigNode tolerance = section.child("tolerance");
  out.loss_tolerance = tolerance.get<double>("loss", 1e-5, "max relative loss difference per step");
  out.grad_norm_tolerance = tolerance.get<double>("grad_norm", 1e-5, "max relative gradient-norm difference");
  out.params_tolerance = tolerance.get<double>("params", 1e-5, "max |parameter - reference| after the steps");
  out.param_grads_tolerance = tolerance.get<double>(
      "param_grads", 1e-4, "max |gradient - reference| / |reference| of any one parameter at any step");
  out.expert_bias_tolerance = tolerance.get<double>(
      "expert_bias", 1e-5, "max |MoE expert bias - reference| after each step's load balancing");
  out.memory_limit = section.get<double>(
      "memory_limit", 0.75, "peak bytes while building and initializing / whole-model bytes (sharding plugins)");
  out.activation_memory_limit = section.get<double>(
      "activation_memory_limit", 0.75,
      "activation-checkpointing plugins: bytes a forward leaves for backward / the plain model's");
  out.world_sizes = section.get<std::vector<int64_t>>(
      "world_sizes", {}, "world sizes the plugin runs on by itself (empty: any); others are reported as skipped");
  std::vector<ConfigNode> variants = section.children("variants");
  if (variant > variants.size()) throw Error("conformance worker: no parallelizer variant " + std::to_string(variant));
  if (variant > 0) {
    const ConfigNode& chosen = variants[variant - 1];
    out.variant = chosen.require<std::string>("name", "the variant's name, shown in its rows (e.g. hsdp)");
    out.options = chosen.child("options");
    out.world_sizes = chosen.get<std::vector<int64_t>>("world_sizes", out.world_sizes, "world sizes of this variant");
  }
  return out;
}

size_t variant_count(const ConfigNode& declaration) {
  return 1 + declaration.child("parallelizer").children("variants").size();
}

// Row suffix: "@4", or "@4:hsdp" for a variant.
std::string suffix(int world_size, const std::string& variant) {
  return "@" + std::to_string(world_size) + (variant.empty() ? "" : ":" + variant);
}

CheckResult parallelizer_row(const std::string& name, const std::string& where, double measured, double limit,
                const std::string& detail) {
  return {"parallelizer." + name + where, measured <= limit, false, measured, limit, detail};
}

// A shards_over entry "a|b": a parameter may lie along either dim (expert
// parallelism: dense weights over dp_shard, experts over efsdp).
std::vector<std::string> alternatives(const std::string& entry) {
  std::vector<std::string> names;
  std::stringstream parts(entry);
  for (std::string name; std::getline(parts, name, '|');) names.push_back(name);
  return names;
}

bool spans_ranks(const DeviceMesh& mesh, const std::string& entry) {
  for (const auto& dim : alternatives(entry)) {
    if (mesh.size(dim) > 1) return true;
  }
  return false;
}

// Every parameter split along each declared dim (when that dim has more
// than one rank), and the local tensor shaped as its layout says.
CheckResult sharding(CausalLM& model, const DeviceMesh& mesh, const ParallelizerDeclaration& declared) {
  int bad = 0;
  std::string first;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const TensorLayout* layout = model.layout(name);
    std::string problem;
    if (!layout) {
      for (const auto& dim : declared.shards_over) {
        if (spans_ranks(mesh, dim)) problem = "no layout recorded, but the plugin declares sharding over " + dim;
      }
    } else {
      if (!item.value().sizes().equals(layout->local_shape)) {
        problem = "local shape differs from its layout (" + layout->describe() + ")";
      }
      for (const auto& dim : declared.shards_over) {
        if (!spans_ranks(mesh, dim)) continue;
        // Shard() along the dim (or one of its alternatives), or a
        // Replicate() the plugin recorded on purpose (tensor parallelism
        // keeps norms whole); a layout that does not mention the dim at all
        // says nothing of how it lies there.
        bool declared_here = false;
        for (const auto& alternative : alternatives(dim)) {
          auto at = std::find(layout->mesh_dims.begin(), layout->mesh_dims.end(), alternative);
          declared_here = declared_here || (at != layout->mesh_dims.end() &&
                                            layout->placements[at - layout->mesh_dims.begin()].kind !=
                                                Placement::Kind::partial);
        }
        if (!declared_here) problem = "neither Shard() nor Replicate() along " + dim + " (" + layout->describe() + ")";
      }
      if (declared.shards_over.empty() && layout->is_sharded()) {
        problem = "sharded (" + layout->describe() + ") but the plugin declares whole parameters";
      }
    }
    if (!problem.empty() && bad++ == 0) first = name + ": " + problem;
  }
  std::string what = declared.shards_over.empty() ? "whole on every rank" : "sharded as declared";
  return parallelizer_row("sharding", suffix(mesh.world_size(), declared.variant), bad, 0, bad ? first : "every parameter " + what);
}

// After the step's gradient finalization, a gradient sits on every
// trainable parameter, shaped and typed like it.
CheckResult gradients(CausalLM& model, const std::string& where) {
  int bad = 0;
  std::string first;
  for (const auto& item : model.named_parameters()) {
    const at::Tensor& param = item.value();
    if (!param.requires_grad()) continue;
    std::string problem;
    if (!param.grad().defined()) problem = "no gradient after finalize_gradients()";
    else if (!param.grad().sizes().equals(param.sizes())) problem = "gradient shaped unlike its local parameter";
    else if (param.grad().device() != param.device()) problem = "gradient on another device";
    if (!problem.empty() && bad++ == 0) first = item.key() + ": " + problem;
  }
  return parallelizer_row("gradients", where, bad, 0, bad ? first : "every gradient matches its parameter");
}

// The plugin's mesh, this rank's layout of each parameter and the reference:
// gathers each parameter whole and compares; also checks that every rank
// holding a copy of it holds the same values.
void compare_parameters(CausalLM& model, const DeviceMesh& mesh, const ReferenceTrace& reference,
                        const ParallelizerDeclaration& declared, CheckResults& rows) {
  double worst = 0, spread = 0;
  std::string worst_name, spread_name;
  Comm& world = mesh.group("world");
  for (const auto& item : model.named_parameters()) {
    at::Tensor local = item.value().detach();
    const TensorLayout* layout = model.layout(item.key());
    at::Tensor full = layout ? full_tensor(local, *layout, mesh) : local.clone();
    full = full.to(at::kDouble);
    auto expected = reference.params.find(item.key());
    double diff = expected == reference.params.end() || !expected->second.sizes().equals(full.sizes())
                      ? INFINITY
                      : (full - expected->second.to(at::kDouble)).abs().max().item<double>();
    if (diff > worst || worst_name.empty()) worst = diff, worst_name = item.key();
    at::Tensor high = full.clone(), low = full.clone();
    world.all_reduce(high, ReduceOp::max);
    world.all_reduce(low, ReduceOp::min);
    double apart = (high - low).abs().max().item<double>();
    if (apart > spread || spread_name.empty()) spread = apart, spread_name = item.key();
  }
  const std::string w = suffix(mesh.world_size(), declared.variant);
  rows.push_back(parallelizer_row("params", w, worst, declared.params_tolerance, "max |param - reference|, worst " + worst_name));
  rows.push_back(parallelizer_row("replicas_agree", w, spread, 0, "ranks' whole parameters differ by at most this, worst " + spread_name));
}

// The largest |expert bias - reference| of any router after a step's load
// balancing; INFINITY when the routers are not the reference's.
double expert_bias_difference(CausalLM& model, const std::map<std::string, at::Tensor>& expected,
                              std::string& worst) {
  std::map<std::string, at::Tensor> biases = expert_biases(model);
  if (biases.size() != expected.size()) {
    worst = std::to_string(biases.size()) + " routers with an expert bias, the reference " +
            std::to_string(expected.size());
    return INFINITY;
  }
  double most = 0;
  for (const auto& [path, bias] : biases) {
    auto reference = expected.find(path);
    double diff = reference == expected.end() || !reference->second.sizes().equals(bias.sizes())
                      ? INFINITY
                      : (bias.to(at::kDouble) - reference->second.to(at::kDouble)).abs().max().item<double>();
    if (diff > most || worst.empty()) most = diff, worst = path;
  }
  return most;
}

// Each parameter's gradient after the step's finalization, gathered whole
// through its layout, against the reference's: the largest
// |grad - reference| / |reference| (2-norms) of any parameter. The global
// norm and the parameters' absolute differences barely notice an error in a
// small parameter (a norm's weight); this does.
class GradientComparison : public StepObserver {
 public:
  GradientComparison(const DeviceMesh& mesh, const ReferenceTrace& reference, std::string where, CheckResults& rows)
      : mesh_(mesh), reference_(reference), where_(std::move(where)), rows_(rows) {}

  void gradients_ready(CausalLM& model) override {
    if (step_ == 1) rows_.push_back(gradients(model, where_));
    const std::map<std::string, at::Tensor>& expected = reference_.gradients[step_ - 1];
    for (const auto& item : model.named_parameters()) {
      if (!item.value().requires_grad()) continue;
      // Every rank gathers every gradient in the same order (a missing one
      // as zeros), so that the collectives match.
      const at::Tensor& grad = item.value().grad();
      at::Tensor local = grad.defined() ? grad.detach() : at::zeros_like(item.value());
      const TensorLayout* layout = model.layout(item.key());
      at::Tensor full = (layout ? full_tensor(local, *layout, mesh_) : local).to(at::kDouble);
      auto reference = expected.find(item.key());
      double difference = INFINITY;
      if (reference != expected.end() && reference->second.sizes().equals(full.sizes())) {
        at::Tensor wanted = reference->second.to(at::kDouble);
        difference = (full - wanted).norm().item<double>() / std::max(wanted.norm().item<double>(), 1e-12);
      } else if (reference == expected.end() && full.abs().max().item<double>() == 0) {
        difference = 0;  // neither has a gradient
      }
      if (difference > worst || worst_name.empty()) {
        worst = difference, worst_name = item.key() + " at step " + std::to_string(step_);
      }
    }
  }
  void next_step() { ++step_; }

  double worst = 0;
  std::string worst_name;

 private:
  const DeviceMesh& mesh_;
  const ReferenceTrace& reference_;
  std::string where_;
  CheckResults& rows_;
  int64_t step_ = 1;
};

// The fixture's steps with the plugin through the trainer's own step, each
// data-parallel rank on its share of every batch; the job's loss and the
// global grad norm are compared with the reference at every step, every
// parameter's gradient relative to its own size, and on a MoE model every
// router's expert bias after the step's load balancing.
void train_on_mesh(CausalLM& model, const DeviceMesh& mesh, const TrainingFixture& fixture,
                   const ReferenceTrace& reference, const ParallelizerDeclaration& declared, CheckResults& rows) {
  const std::string where = suffix(mesh.world_size(), declared.variant);
  const int64_t dp = mesh.size("dp");
  const int64_t dp_rank = mesh.coordinate("dp");
  if (fixture.batch % dp != 0) {
    throw Error("the fixture's batch (" + std::to_string(fixture.batch) + ") must divide over " + std::to_string(dp) +
                " data-parallel ranks; set model.batch in the declaration");
  }
  const int64_t rows_per_rank = fixture.batch / dp;
  FixtureStep step_runner(model, &mesh);
  GradientComparison gradient_check(mesh, reference, where, rows);
  double loss_diff = 0, norm_diff = 0, bias_diff = 0;
  std::string bias_worst;
  at::manual_seed(fixture.seed);  // as the reference run: dropout draws the same
  for (int64_t step = 1; step <= fixture.steps; ++step) {
    at::Tensor windows = fixture_windows(fixture, step).narrow(0, dp_rank * rows_per_rank, rows_per_rank);
    StepResult result = step_runner.run(windows, fixture.lr, &gradient_check);
    gradient_check.next_step();
    loss_diff = std::max(loss_diff, relative_difference(result.loss.item<double>(), reference.losses[step - 1]));
    norm_diff = std::max(norm_diff, relative_difference(result.grad_norm.item<double>(), reference.grad_norms[step - 1]));
    // The step hooks' load balancing, their reduction of the counts
    // included: a plugin must leave each router's counts what one process's
    // would sum to.
    std::string worst;
    double diff = expert_bias_difference(model, reference.expert_biases[step - 1], worst);
    if (diff > bias_diff || bias_worst.empty()) bias_diff = diff, bias_worst = worst + " after step " + std::to_string(step);
  }
  std::string steps = std::to_string(fixture.steps) + " SGD steps on " + mesh.describe();
  rows.push_back(parallelizer_row("loss", where, loss_diff, declared.loss_tolerance, "max relative loss difference, " + steps));
  rows.push_back(parallelizer_row("grad_norm", where, norm_diff, declared.grad_norm_tolerance, "max relative grad-norm difference"));
  rows.push_back(parallelizer_row("param_grads", where, gradient_check.worst, declared.param_grads_tolerance,
                                  "max over parameters and steps of |grad - reference| / |reference|, worst " +
                                      gradient_check.worst_name));
  if (!reference.expert_biases.back().empty()) {
    at::Tensor worst = at::full({1}, bias_diff, at::kDouble);
    mesh.group("world").all_reduce(worst, ReduceOp::max);
    const double most = worst.item<double>();
    rows.push_back(parallelizer_row("expert_bias", where, most, declared.expert_bias_tolerance,
                       "max |expert bias - reference| over routers, steps and ranks after the load balancing" +
                           (most > 0 && most == bias_diff ? ", worst " + bias_worst : std::string())));
  }
}

// Activation checkpointing must pay for its recompute: a forward (its loss
// kept, as before backward) leaves fewer bytes alive than the plain model's.
CheckResult activation_memory(CausalLM& model, const TrainingFixture& fixture, const std::string& where, double limit) {
  auto plain = build_single_process(fixture);
  at::Tensor windows = fixture_windows(fixture, 1);
  auto retained = [&](CausalLM& m) {
    at::Tensor kept;
    int64_t bytes = cpu_memory_during([&] { kept = next_token_loss(m, windows); }).retained;
    return static_cast<double>(bytes);
  };
  double with = retained(model), without = retained(*plain);
  return parallelizer_row("activation_memory", where, with / without, limit,
             "bytes a forward leaves for backward / without the plugin (" + std::to_string(static_cast<int64_t>(with)) +
                 " / " + std::to_string(static_cast<int64_t>(without)) + " B)");
}

CheckResults parallelizer_worker(const WorkerArgs& args) {
  const PluginInfo& info = PluginRegistry::instance().load(args.plugin);
  ConfigNode declaration = ConfigNode::load_file(args.declaration);
  ParallelizerDeclaration declared = read_declaration(declaration, std::stoul(args.value("variant")));
  TrainingFixture fixture = load_fixture(declaration);
  World world = detect_world();
  const std::string where = suffix(world.world_size, declared.variant);
  ReferenceTrace reference = train_reference(fixture);

  PluginContext context;
  context.options = declared.options;
  context.rank = world.rank;
  context.world_size = world.world_size;
  context.dump_folder = args.scratch;
  context.training_steps = fixture.steps;
  std::vector<NamedParallelizer> parallelizers;
  parallelizers.push_back({info.name, PluginRegistry::instance().create_parallelizer(info.name, context)});
  for (const auto& companion : declared.with) {
    PluginContext companion_context = context;
    companion_context.options = companion.options;
    const std::string& name = PluginRegistry::instance().load(companion.plugin).name;
    parallelizers.push_back({name, PluginRegistry::instance().create_parallelizer(name, companion_context)});
  }
  sort_canonical(parallelizers);
  DistRuntime runtime(world, worker_timeouts());
  std::vector<MeshSplitRequest> splits;  // the plugins' own dims (expert parallelism's ep x efsdp)
  for (const auto& item : parallelizers) {
    for (const auto& split : item.parallelizer->mesh_splits()) splits.push_back(split);
  }
  DeviceMesh mesh(runtime, resolve_mesh_degrees(mesh_requests(parallelizers), world.world_size), splits);
  const c10::Device cpu(c10::kCPU);
  ParallelizeContext parallel_context{*fixture.spec, cpu, &mesh, c10::kFloat, c10::kFloat};

  CheckResults rows;
  std::shared_ptr<CausalLM> model;
  int64_t peak = peak_cpu_bytes_during([&] {
    model = build_model(*fixture.spec, parallelizers, nullptr, parallel_context);
    model->init_weights(fixture.seed);
  });
  model->train();
  int64_t whole = 0;
  for (const auto& [name, tensor] : reference.params) whole += tensor.numel() * tensor.element_size();
  double ratio = static_cast<double>(peak) / static_cast<double>(whole);
  if (!declared.shards_over.empty() && world.world_size > 1) {
    rows.push_back(parallelizer_row("memory", where, ratio, declared.memory_limit,
                       "peak CPU bytes while building, parallelizing and initializing / whole model (" +
                           std::to_string(whole) + " B)"));
  }
  rows.push_back(sharding(*model, mesh, declared));

  train_on_mesh(*model, mesh, fixture, reference, declared, rows);
  compare_parameters(*model, mesh, reference, declared, rows);
  for (const auto& item : parallelizers) {
    if (item.plugin == info.name && item.parallelizer->apply_order() == ApplyOrder::activation_checkpoint) {
      rows.push_back(activation_memory(*model, fixture, where, declared.activation_memory_limit));
    }
  }
  return rows;
}

}  // namespace

void register_parallelizer_worker() { register_worker("parallelizer", parallelizer_worker); }

CheckResults check_parallelizer(const std::string& plugin, const std::string& declaration_path,
                                const ConfigNode& declaration, const std::vector<int>& ranks,
                                const std::string& scratch) {
  // Bad input is reported before any rank starts: the factory reads (and
  // so validates) the plugin's options here too.
  const PluginInfo& info = PluginRegistry::instance().load(plugin);
  TrainingFixture fixture = load_fixture(declaration);
  CheckResults results;
  for (size_t variant = 0; variant < variant_count(declaration); ++variant) {
    ParallelizerDeclaration declared = read_declaration(declaration, variant);
    PluginContext context;
    context.options = declared.options;
    PluginRegistry::instance().create_parallelizer(info.name, context);  // reads, so checks, the options
    for (const auto& companion : declared.with) {
      context.options = companion.options;
      PluginRegistry::instance().create_parallelizer(PluginRegistry::instance().load(companion.plugin).name, context);
    }
    for (int world_size : ranks) {
      const std::string where = suffix(world_size, declared.variant);
      const auto& sizes = declared.world_sizes;
      if (!sizes.empty() && std::find(sizes.begin(), sizes.end(), world_size) == sizes.end()) {
        results.push_back({"parallelizer.run" + where, false, true, 0, 0,
                           "the declaration's world_sizes exclude " + std::to_string(world_size) + " ranks"});
        continue;
      }
      WorkerRun run;
      run.worker = "parallelizer";
      run.args = {plugin, declaration_path, scratch + "/parallelizer" + where, {{"variant", std::to_string(variant)}}};
      run.ranks = world_size;
      run.deadline = std::chrono::seconds(240);
      run.row_on_failure = "parallelizer.run" + where;
      CheckResults rows = run_workers(run);
      results.insert(results.end(), rows.begin(), rows.end());
    }
  }
  return results;
}

}  // namespace titan::conformance
