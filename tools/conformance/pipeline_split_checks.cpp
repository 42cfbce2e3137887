// Splits the fixture's model (on the meta device: no weights) into each
// stage count asked and checks the lists against the model itself: the
// top-level modules and blocks are read from the built model (a block is a
// child of the top-level container that CausalLM::block() returns), not
// from the plugin's own reading of it.
#include "pipeline_split_checks.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cmath>
#include <map>
#include <set>

#include "titan/error.hpp"
#include "titan/model.hpp"
#include "titan/registry.hpp"
#include "training_fixture.h"

namespace titan::conformance {

namespace {

// The units a stage holds, in model order: "tok_embeddings", "layers.0",
// ..., "norm", "output"; `container` ("layers") stands for every block.
struct ModelUnits {
  std::vector<std::string> paths;
  std::map<std::string, size_t> index;
  std::string container;
  std::vector<size_t> blocks;
};

ModelUnits read_units(CausalLM& model) {
  std::set<const torch::nn::Module*> blocks;
  for (int64_t i = 0; i < model.num_blocks(); ++i) blocks.insert(model.block(i).get());
  ModelUnits units;
  for (const auto& child : model.named_children()) {
    bool holds_blocks = false;
    for (const auto& inner : child.value()->named_children()) holds_blocks |= blocks.count(inner.value().get()) > 0;
    if (!holds_blocks) {
      units.index[child.key()] = units.paths.size();
      units.paths.push_back(child.key());
      continue;
    }
    units.container = child.key();
    for (const auto& inner : child.value()->named_children()) {
      const std::string path = child.key() + "." + inner.key();
      units.index[path] = units.paths.size();
      units.blocks.push_back(units.paths.size());
      units.paths.push_back(path);
    }
  }
  return units;
}

using Stages = std::vector<std::vector<std::string>>;

std::string describe(const std::vector<std::string>& stage) {
  std::string out;
  for (const auto& path : stage) out += (out.empty() ? "" : " ") + path;
  return "[" + out + "]";
}

std::string describe(const Stages& stages) {
  std::string out;
  for (const auto& stage : stages) out += (out.empty() ? "" : " | ") + describe(stage);
  return out;
}

bool names_a_split_key(const std::string& message) {
  return message.find("pipeline_parallel_") != std::string::npos ||
         message.find("module_fqns_per_model_part") != std::string::npos;
}

// Every parameter of the model on exactly one stage once core cuts each.
CheckResult cuts(const ModelSpec& spec, const Stages& stages, const std::string& where) {
  std::map<std::string, int> owners;
  for (const auto& item : spec.build(c10::Device(c10::kMeta))->named_parameters()) owners[item.key()] = 0;
  int bad = 0;
  std::string first;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::shared_ptr<CausalLM> part = spec.build(c10::Device(c10::kMeta));
    try {
      cut_to_stage(*part, stages[s]);
    } catch (const std::exception& error) {
      if (bad++ == 0) first = "stage " + std::to_string(s) + ": " + error.what();
      continue;
    }
    for (const auto& item : part->named_parameters()) ++owners[item.key()];
  }
  for (const auto& [name, count] : owners) {
    if (count == 1 || bad++ > 0) continue;
    first = name + (count == 0 ? " is on no stage" : " is on " + std::to_string(count) + " stages");
  }
  return {"pipeline_splitter.split_cuts" + where, bad == 0, false, static_cast<double>(bad), 0,
          bad == 0 ? "cut_to_stage keeps each of the " + std::to_string(owners.size()) +
                         " parameters on exactly one stage"
                   : first};
}

}  // namespace

CheckResults check_pipeline_splitter(const std::string& plugin, const ConfigNode& declaration,
                                     const std::vector<int>& stage_counts) {
  // Bad input is reported before anything is built: the factory reads (and
  // so validates) the plugin's options here.
  const std::string name = PluginRegistry::instance().load(plugin).name;
  TrainingFixture fixture = load_fixture(declaration);
  const ModelSpec& spec = *fixture.spec;
  PluginContext context;
  context.options = declaration.child("pipeline_splitter").child("options");
  auto first = PluginRegistry::instance().create_pipeline_splitter(name, context);
  auto second = PluginRegistry::instance().create_pipeline_splitter(name, context);
  PipelineSplitter* splitter = first.get();
  PipelineSplitter* again = second.get();
  std::shared_ptr<CausalLM> model = spec.build(c10::Device(c10::kMeta));
  const ModelUnits units = read_units(*model);
  CheckResults rows;
  auto row = [&](const std::string& name, const std::string& where, double measured, const std::string& detail) {
    rows.push_back({"pipeline_splitter." + name + where, measured == 0, false, measured, 0, detail});
  };
  int accepted = 0;
  std::string refusals;
  for (int count : std::set<int>(stage_counts.begin(), stage_counts.end())) {
    const std::string where = "@" + std::to_string(count);
    Stages stages;
    try {
      stages = splitter->stage_modules(spec, count);
    } catch (const std::exception& error) {
      // A split the model cannot take is refused naming the option to change.
      const std::string message = error.what();
      const bool named = names_a_split_key(message);
      rows.push_back({"pipeline_splitter.split" + where, false, named, 0, 0,
                      (named ? "refuses " : "refuses without naming an option: ") + std::to_string(count) +
                          " stages: " + message.substr(0, message.find('\n'))});
      refusals += (refusals.empty() ? "" : ", ") + std::to_string(count);
      continue;
    }
    ++accepted;
    const std::string split = describe(stages);

    row("split_count", where, std::abs(static_cast<double>(stages.size()) - count),
        std::to_string(stages.size()) + (stages.size() == 1 ? " stage" : " stages") + " for default_stages = " +
            std::to_string(count) + ": " + split);

    int empty = 0;
    for (const auto& stage : stages) empty += stage.empty() ? 1 : 0;
    row("split_nonempty", where, empty,
        empty == 0 ? "every stage holds a module" : std::to_string(empty) + " empty stages: " + split);

    // Which unit each entry covers, in the order the stages list them.
    std::vector<int> seen(units.paths.size(), 0);
    std::vector<size_t> order;
    std::string unknown;
    for (const auto& stage : stages) {
      for (const auto& path : stage) {
        std::vector<size_t> covered;
        if (path == units.container) covered = units.blocks;
        else if (units.index.count(path)) covered = {units.index.at(path)};
        else if (unknown.empty()) unknown = path;
        for (size_t u : covered) ++seen[u], order.push_back(u);
      }
    }
    int missing = 0, twice = 0;
    std::string example;
    for (size_t u = 0; u < seen.size(); ++u) {
      if (seen[u] == 1) continue;
      (seen[u] == 0 ? missing : twice) += 1;
      if (example.empty()) example = units.paths[u] + (seen[u] == 0 ? " on no stage" : " on several stages");
    }
    const int not_units = unknown.empty() ? 0 : 1;
    if (example.empty() && not_units) example = "'" + unknown + "' is not a whole block or top-level module";
    row("split_covers", where, missing + twice + not_units,
        missing + twice + not_units == 0
            ? "each of the " + std::to_string(units.paths.size()) + " top-level modules and blocks on one stage"
            : example + ": " + split);

    int backwards = 0;
    for (size_t i = 1; i < order.size(); ++i) backwards += order[i] <= order[i - 1] ? 1 : 0;
    row("split_order", where, backwards,
        backwards == 0 ? "stages follow the model's order"
                       : std::to_string(backwards) + " modules listed before one that comes earlier: " + split);

    rows.push_back(cuts(spec, stages, where));

    bool same = false;
    std::string differs;
    try {
      same = again->stage_modules(spec, count) == stages && splitter->stage_modules(spec, count) == stages;
      if (!same) differs = "another instance (or a second call) gives another split than " + split;
    } catch (const std::exception& error) {
      differs = std::string("a second instance throws: ") + error.what();
    }
    row("split_deterministic", where, same ? 0 : 1,
        same ? "two instances give the same split (each rank computes its own)" : differs);
  }
  rows.push_back({"pipeline_splitter.split_accepts_some", accepted > 0,
                  false, accepted > 0 ? 0.0 : 1.0, 0,
                  accepted > 0 ? "splits the model into " + std::to_string(accepted) + " of the stage counts asked"
                               : "refuses every stage count asked (" + refusals + ")"});
  return rows;
}

}  // namespace titan::conformance
