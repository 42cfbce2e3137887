// The `pipeline` plugin: pipeline parallelism's options (TorchTitan's
// parallelism.* names) and the descriptor. It asks for the pp mesh dim and
// says how the model splits into stages; core builds and runs the stages.
#include <algorithm>
#include <sstream>

#include "pipeline_splitter.h"
#include "titan/plugin.hpp"

namespace {

using titan::pipeline::PipelineOptions;

// TorchTitan's list of lists ([[tok_embeddings, layers.0], [layers.1, norm,
// output]]), or one string per stage with its paths separated by spaces or
// commas (["tok_embeddings layers.0", "layers.1 norm output"]), shorter on
// a --set command line.
std::vector<std::vector<std::string>> read_parts(const titan::ConfigNode& node) {
  const char* key = "module_fqns_per_model_part";
  const char* doc =
      "the module paths of each stage: a list of lists ([[tok_embeddings, layers.0], [layers.1, norm, output]]) or "
      "one string per stage, paths separated by spaces; empty: split by the layer rule";
  try {
    return node.get<std::vector<std::vector<std::string>>>(key, {}, doc);
  } catch (const titan::ConfigError&) {
  }
  std::vector<std::string> lines;
  try {
    lines = node.get<std::vector<std::string>>(key, {}, doc);
  } catch (const titan::ConfigError&) {
    node.fail(key, "expected a list of lists of module paths, e.g. [[tok_embeddings, layers.0, layers.1], "
                   "[layers.2, layers.3, norm, output]], or one string per stage, e.g. "
                   "[\"tok_embeddings layers.0 layers.1\", \"layers.2 layers.3 norm output\"]");
  }
  std::vector<std::vector<std::string>> parts;
  for (std::string line : lines) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream words(line);
    parts.emplace_back();
    for (std::string path; words >> path;) parts.back().push_back(path);
  }
  return parts;
}

PipelineOptions read_options(const titan::ConfigNode& node) {
  PipelineOptions options;
  auto& settings = options.settings;
  auto& split = options.split;
  settings.schedule = "1F1B";  // TorchTitan's default
  settings.degree = node.degree("pipeline_parallel_degree", -1,
                                "ranks the stages are spread over, the pp mesh dim (-1: the rest of the world)");
  settings.schedule = node.get<std::string>(
      "pipeline_parallel_schedule", settings.schedule,
      "schedule name, case-insensitive (1F1B, GPipe, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, "
      "ZBVZeroBubble, DualPipeV, or one a pipeline_schedule plugin registers)");
  settings.schedule_csv = node.get<std::string>("pipeline_parallel_schedule_csv", settings.schedule_csv,
                                                "a file of per-rank action lists to run instead (\"\": none)");
  settings.microbatch_size = node.get<int64_t>("pipeline_parallel_microbatch_size", settings.microbatch_size,
                                               "sequences per microbatch");
  settings.microbatches = node.get<int64_t>(
      "num_pp_microbatches", settings.microbatches,
      "microbatches per step (0: training.local_batch_size / pipeline_parallel_microbatch_size)");
  // has() before get(): get() writes the default back into the tree.
  const bool less_given = node.has("pipeline_parallel_first_stage_less_layers") ||
                          node.has("pipeline_parallel_last_stage_less_layers");
  split.layers_per_stage = node.get<int64_t>(
      "pipeline_parallel_layers_per_stage", split.layers_per_stage,
      "layer units per stage; the stage count follows from it (0: pp degree x the schedule's stages per rank)");
  split.first_stage_less_layers =
      node.get<int64_t>("pipeline_parallel_first_stage_less_layers", split.first_stage_less_layers,
                        "blocks fewer on the first stage, for the embedding's cost");
  split.last_stage_less_layers = node.get<int64_t>("pipeline_parallel_last_stage_less_layers",
                                                   split.last_stage_less_layers,
                                                   "blocks fewer on the last stage, for the norm, output and loss");
  options.module_fqns_per_model_part = read_parts(node);
  settings.trace = node.get<std::string>(
      "pipeline_parallel_trace", settings.trace,
      "path prefix of a Chrome-trace JSON of each rank's actions (\"\": none)");

  if (settings.schedule.empty()) node.fail("pipeline_parallel_schedule", "expected a schedule name, e.g. 1F1B");
  if (settings.microbatch_size < 1) node.fail("pipeline_parallel_microbatch_size", "expected a size >= 1");
  if (settings.microbatches < 0) node.fail("num_pp_microbatches", "expected a count >= 1, or 0 for the default");
  if (settings.microbatch_size != 1 && settings.microbatches != 0) {
    node.fail("num_pp_microbatches",
              "set either pipeline_parallel_microbatch_size (" + std::to_string(settings.microbatch_size) +
                  ") or num_pp_microbatches (" + std::to_string(settings.microbatches) +
                  "), not both: each decides the other from training.local_batch_size");
  }
  if (split.layers_per_stage < 0) {
    node.fail("pipeline_parallel_layers_per_stage", "expected a count >= 1, or 0 to leave it to the schedule");
  }
  if (split.first_stage_less_layers < 0) {
    node.fail("pipeline_parallel_first_stage_less_layers", "expected a count >= 0");
  }
  if (split.last_stage_less_layers < 0) {
    node.fail("pipeline_parallel_last_stage_less_layers", "expected a count >= 0");
  }
  if (!options.module_fqns_per_model_part.empty()) {
    if (split.layers_per_stage > 0) {
      node.fail("module_fqns_per_model_part",
                "gives the stages itself; remove it or pipeline_parallel_layers_per_stage (" +
                    std::to_string(split.layers_per_stage) + ")");
    }
    if (less_given) {
      node.fail("module_fqns_per_model_part",
                "gives the stages itself, so pipeline_parallel_first_stage_less_layers and "
                "pipeline_parallel_last_stage_less_layers would be ignored; remove them or this list");
    }
  }
  return options;
}

// titan plan's pipeline: the degree, schedule and microbatch size it chose.
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  if (layout.pp == 1) return "";
  return "  - name: " + name + "\n    pipeline_parallel_degree: " + std::to_string(layout.pp) +
         "\n    pipeline_parallel_schedule: " + layout.pp_schedule +
         "\n    pipeline_parallel_microbatch_size: " + std::to_string(layout.pp_microbatch_size) + "   # " +
         std::to_string(layout.pp_microbatches) + " microbatches a step\n";
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(pipeline_splitter, titan::pipeline::StageSplitter, "1.0",
                        "pipeline parallelism: the stage split and the schedule settings (core runs the schedule)",
                        plan_entry, read_options)
