// The stage split: TorchTitan's even split of layer units, where the input
// and output modules count as first_less / last_less blocks of weight (the
// embedding and the output head cost about a block each), and the checks on
// a user's own list. Errors say what would work, because the usual fix is
// one number in the YAML.
#include "stage_split.h"

#include <torch/nn/module.h>

#include <map>

#include "titan/config.hpp"  // closest_match
#include "titan/error.hpp"
#include "titan/module_path.hpp"

namespace titan::pipeline {

namespace {

const char* kFirstLess = "pipeline_parallel_first_stage_less_layers";
const char* kLastLess = "pipeline_parallel_last_stage_less_layers";
const char* kLayersPerStage = "pipeline_parallel_layers_per_stage";
const char* kParts = "module_fqns_per_model_part";

std::string text(int64_t value) { return std::to_string(value); }

// Blocks per stage before any check (stages >= 2).
std::vector<int64_t> raw_counts(int64_t blocks, int64_t stages, int64_t first_less, int64_t last_less) {
  const int64_t units = blocks + first_less + last_less;
  std::vector<int64_t> counts;
  for (int64_t s = 0; s < stages; ++s) {
    int64_t n = units / stages + (s < units % stages ? 1 : 0);
    if (s == 0) n -= first_less;
    if (s == stages - 1) n -= last_less;
    counts.push_back(n);
  }
  return counts;
}

bool stage_ok(const std::vector<int64_t>& counts, size_t s) {
  const bool middle = s > 0 && s + 1 < counts.size();
  return counts[s] > 0 || (counts[s] == 0 && !middle);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// "tok_embeddings, layers.0 .. layers.5, norm, output"
std::string describe(const ModelLayout& layout) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  for (const auto& name : layout.inputs) add(name);
  if (!layout.blocks.empty()) {
    add(layout.blocks.size() == 1 ? layout.blocks.front() : layout.blocks.front() + " .. " + layout.blocks.back());
  }
  for (const auto& name : layout.outputs) add(name);
  return out;
}

}  // namespace

ModelLayout read_layout(const torch::nn::Module& model, const std::string& flavor) {
  ModelLayout layout;
  layout.flavor = flavor;
  bool seen_layers = false;
  for (const auto& child : model.named_children()) {
    if (child.key() == "layers") {
      seen_layers = true;
      for (const auto& block : child.value()->named_children()) layout.blocks.push_back("layers." + block.key());
    } else {
      (seen_layers ? layout.outputs : layout.inputs).push_back(child.key());
    }
  }
  if (!seen_layers || layout.blocks.empty()) {
    throw Error("pipeline: model flavor '" + flavor + "' has no blocks under a top-level 'layers' module; the "
                "pipeline plugin cuts models built that way (as llama3)");
  }
  return layout;
}

std::vector<int64_t> blocks_per_stage(int64_t blocks, int64_t stages, int64_t first_less, int64_t last_less) {
  if (stages < 1) return {};
  if (stages == 1) return {blocks};
  std::vector<int64_t> counts = raw_counts(blocks, stages, first_less, last_less);
  for (size_t s = 0; s < counts.size(); ++s) {
    if (!stage_ok(counts, s)) return {};
  }
  return counts;
}

std::vector<std::vector<std::string>> split_by_rule(const ModelLayout& layout, const SplitOptions& options,
                                                    int64_t default_stages) {
  const int64_t blocks = static_cast<int64_t>(layout.blocks.size());
  const int64_t f = options.first_stage_less_layers;
  const int64_t l = options.last_stage_less_layers;
  const int64_t lps = options.layers_per_stage;
  // layers_per_stage sets the stage count from the units; otherwise core's count (pp x stages per rank).
  auto stages_for = [&](int64_t first, int64_t last, int64_t per_stage) {
    return per_stage > 0 ? ceil_div(blocks + first + last, per_stage) : default_stages;
  };
  const int64_t stages = stages_for(f, l, lps);
  if (stages < 1) {
    throw Error("pipeline: " + text(stages) + " pipeline stages asked for; a pipeline needs at least one " +
                "(pipeline_parallel_degree x the stages per rank of pipeline_parallel_schedule)");
  }
  std::vector<int64_t> counts = blocks_per_stage(blocks, stages, f, l);
  if (counts.empty()) {
    const std::vector<int64_t> raw = raw_counts(blocks, stages, f, l);
    size_t bad = 0;
    while (stage_ok(raw, bad)) ++bad;
    const int64_t units = blocks + f + l;
    std::string why = "model flavor '" + layout.flavor + "': " + text(blocks) + " blocks + " + kFirstLess + " " +
                      text(f) + " + " + kLastLess + " " + text(l) + " = " + text(units) + " layer units over " +
                      text(stages) + " stages" +
                      (lps > 0 ? " (" + std::string(kLayersPerStage) + " " + text(lps) + ")"
                               : " (pipeline_parallel_degree x the stages per rank of pipeline_parallel_schedule)") +
                      " would leave stage " + text(static_cast<int64_t>(bad)) +
                      (raw[bad] == 0 ? " with no block" : " with " + text(raw[bad]) + " blocks");
    if (raw[bad] < 0) {
      why += std::string(" (its units less ") + (bad == 0 ? kFirstLess : kLastLess) + ")";
    }
    // What would work, changing one number at a time.
    std::vector<std::string> fixes;
    if (lps > 0) {
      for (int64_t p = lps + 1; p <= units; ++p) {
        if (!blocks_per_stage(blocks, stages_for(f, l, p), f, l).empty()) {
          fixes.push_back(std::string(kLayersPerStage) + " " + text(p));
          break;
        }
      }
    } else {
      for (int64_t s = stages - 1; s >= 1; --s) {
        if (!blocks_per_stage(blocks, s, f, l).empty()) {
          fixes.push_back(text(s) + " stages (a smaller pipeline_parallel_degree, a schedule with fewer stages per "
                          "rank, or " + kLayersPerStage + ")");
          break;
        }
      }
    }
    for (int64_t value = f - 1; value >= 0; --value) {
      if (!blocks_per_stage(blocks, stages_for(value, l, lps), value, l).empty()) {
        fixes.push_back(std::string(kFirstLess) + " " + text(value));
        break;
      }
    }
    for (int64_t value = l - 1; value >= 0; --value) {
      if (!blocks_per_stage(blocks, stages_for(f, value, lps), f, value).empty()) {
        fixes.push_back(std::string(kLastLess) + " " + text(value));
        break;
      }
    }
    std::string works;
    for (size_t i = 0; i < fixes.size(); ++i) works += (i == 0 ? "" : i + 1 == fixes.size() ? " or " : ", ") + fixes[i];
    throw Error("pipeline: " + why + "; " +
                (works.empty() ? "no stage count splits this model" : works + " would work"));
  }

  std::vector<std::vector<std::string>> stages_out(counts.size());
  size_t next = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    auto& stage = stages_out[s];
    if (s == 0) stage = layout.inputs;
    for (int64_t i = 0; i < counts[s]; ++i) stage.push_back(layout.blocks[next++]);
    if (s + 1 == counts.size()) stage.insert(stage.end(), layout.outputs.begin(), layout.outputs.end());
  }
  return stages_out;
}

std::vector<std::vector<std::string>> check_parts(const torch::nn::Module& model, const ModelLayout& layout,
                                                  const std::vector<std::vector<std::string>>& parts) {
  // The units a stage may hold, in model order.
  std::vector<std::string> units = layout.inputs;
  units.insert(units.end(), layout.blocks.begin(), layout.blocks.end());
  units.insert(units.end(), layout.outputs.begin(), layout.outputs.end());
  std::map<std::string, size_t> index;
  for (size_t u = 0; u < units.size(); ++u) index[units[u]] = u;
  const std::string model_text = " (model flavor '" + layout.flavor + "': " + describe(layout) + ")";

  std::vector<int64_t> owner(units.size(), -1);
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::string where = "pipeline: " + std::string(kParts) + "[" + text(static_cast<int64_t>(p)) + "]";
    if (parts[p].empty()) throw Error(where + " is empty; every stage holds at least one module" + model_text);
    for (const auto& path : parts[p]) {
      if (!find_module(model, path)) {
        const std::string hint = closest_match(path, units);
        throw Error(where + ": the model has no module '" + path + "'" +
                    (hint.empty() ? "" : "; did you mean '" + hint + "'?") + model_text);
      }
      std::vector<size_t> covered;
      if (index.count(path)) {
        covered.push_back(index[path]);
      } else if (path == "layers") {
        for (const auto& block : layout.blocks) covered.push_back(index[block]);
      } else {
        std::string unit;
        for (const auto& candidate : units) {
          if (path.compare(0, candidate.size() + 1, candidate + ".") == 0) unit = candidate;
        }
        throw Error(where + ": '" + path + "' is " +
                    (unit.empty() ? "not a block or top-level module" : "a part of '" + unit + "'") +
                    "; a stage holds whole blocks and top-level modules" + model_text);
      }
      for (size_t u : covered) {
        if (owner[u] >= 0) {
          throw Error(where + ": '" + units[u] + "' is also in " + kParts + "[" + text(owner[u]) +
                      "]; each block and top-level module belongs to exactly one stage");
        }
        owner[u] = static_cast<int64_t>(p);
      }
    }
  }
  for (size_t u = 0; u < units.size(); ++u) {
    if (owner[u] < 0) {
      throw Error("pipeline: " + std::string(kParts) + ": '" + units[u] +
                  "' is in no part; every block and top-level module belongs to exactly one stage" + model_text);
    }
  }
  // Activations flow stage to stage: stage p+1 starts where stage p ends.
  for (size_t u = 1; u < units.size(); ++u) {
    if (owner[u] < owner[u - 1]) {
      throw Error("pipeline: " + std::string(kParts) + ": '" + units[u] + "' (part " + text(owner[u]) +
                  ") comes after '" + units[u - 1] + "' (part " + text(owner[u - 1]) +
                  ") in the model; the parts must hold the model's modules in order" + model_text);
    }
  }
  return parts;
}

}  // namespace titan::pipeline
