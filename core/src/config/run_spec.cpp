// Plans a run: core sections, plugin selection and creation, unknown keys.
#include "titan/run_spec.hpp"

#include <algorithm>
#include <cctype>

#include <c10/util/StringUtil.h>

#include "titan/device_mesh.hpp"
#include "titan/registry.hpp"

namespace titan {

namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

PluginContext context_for(const ConfigNode& options, const CoreConfig& core, int rank, int world_size) {
  PluginContext context;
  context.options = options;
  context.dump_folder = core.run_folder();
  context.rank = rank;
  context.world_size = world_size;
  context.training_steps = core.training.steps;
  return context;
}

// TorchTitan's sink switches: `metrics.enable_<plugin>: true` adds the
// metrics_sink plugin of that name (enable_tensorboard -> tensorboard), which
// reads its options from the same section. A switched-off sink whose plugin
// is on the path is still created and dropped, so that its options (e.g.
// save_tb_folder) are checked and known; enable_jsonl is core's own file.
template <class MakeContext>
std::vector<std::unique_ptr<MetricsSink>> switched_metrics_sinks(const ConfigNode& metrics, const MakeContext& make_context) {
  auto& registry = PluginRegistry::instance();
  const std::string prefix = "enable_";
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  std::vector<std::string> available;  // the plugin path, scanned once when a switch is present
  for (const std::string& key : metrics.keys()) {
    if (key.rfind(prefix, 0) != 0 || key == "enable_jsonl") continue;
    const std::string name = key.substr(prefix.size());
    const bool enabled = metrics.get<bool>(key, false, "write metrics through the metrics_sink plugin '" + name + "'");
    if (available.empty()) available = registry.available();
    if (std::find(available.begin(), available.end(), name) == available.end()) {
      if (!enabled) continue;
      metrics.fail(key, "no metrics_sink plugin '" + name + "' on the plugin path (" +
                            c10::Join(", ", registry.search_dirs()) + "); set it to false, or add the plugin's "
                            "folder to job.plugin_path");
    }
    const uint32_t kinds = registry.load(name).kinds;
    if (!(kinds & kind_metrics_sink)) {
      metrics.fail(key, "plugin '" + name + "' provides " + kinds_to_string(kinds) + ", not a metrics_sink");
    }
    auto sink = registry.create_metrics_sink(name, make_context(metrics));
    if (enabled) sinks.push_back(std::move(sink));
  }
  return sinks;
}

// Tied embeddings under a pipeline: the last stage holds a copy of the
// embedding matrix for its head, kept equal to the first stage's by summing
// the two gradients (pipeline_setup.cpp). Both on one rank would be one
// module twice in that rank's model.
void check_tied_ends(const PipelineRun& run, bool tied) {
  // What put the embedding matrix on both ends: a tied head, or multi-token prediction.
  const std::string key = tied ? "model.enable_weight_tying" : "model.num_mtp_layers";
  const std::string what = tied ? "the tied embedding matrix" : "the embedding matrix (multi-token prediction embeds there)";
  const PipelineShape& shape = run.program.shape;
  const int64_t first = stage_to_rank(run.program.placement, shape, 0);
  const int64_t last = stage_to_rank(run.program.placement, shape, shape.stages - 1);
  if (first == last) {
    throw Error(key + ": the schedule " + run.program.name + " (" + placement_name(run.program.placement) +
                " placement, " + shape.to_string() + ") puts the first and the last stage, which both hold " + what +
                ", on pp rank " + std::to_string(first) +
                "; choose a schedule with a loop placement (1F1B, GPipe, Interleaved1F1B) or set " + key +
                (tied ? "=false" : "=0"));
  }
}

}  // namespace

void sort_canonical(std::vector<NamedParallelizer>& parallelizers) {
  std::stable_sort(parallelizers.begin(), parallelizers.end(), [](const auto& a, const auto& b) {
    return static_cast<int>(a.parallelizer->apply_order()) < static_cast<int>(b.parallelizer->apply_order());
  });
}

std::optional<PipelineRun> validate_parallelism(const RunSpec& spec, const std::map<std::string, int64_t>& degrees) {
  std::vector<ApplyOrder> apply_orders;
  for (const auto& item : spec.parallelizers) apply_orders.push_back(item.parallelizer->apply_order());
  ValidateContext context{*spec.model, degrees, spec.core.training.seq_len, apply_orders};
  if (spec.pipeline) spec.pipeline->validate(context);
  for (const auto& [name, parallelizer] : spec.parallelizers) parallelizer->validate(context);
  // After the plugins' own checks, whose messages name their keys.
  check_mesh_splits(mesh_splits(spec), degrees);
  // The stages and every pp rank's action lists are compiled and statically
  // checked here, once per run, so a pipeline that cannot run fails in
  // `titan config check` and before any group exists in training.
  std::optional<PipelineRun> pipeline_run;
  auto pp = degrees.find("pp");
  if (spec.pipeline && pp != degrees.end()) pipeline_run = resolve_pipeline_run(spec, pp->second);
  if (pipeline_run && spec.model->head_needs_embeddings()) check_tied_ends(*pipeline_run, spec.model->ties_embeddings());
  return pipeline_run;
}

std::vector<MeshDimRequest> mesh_requests(const std::vector<NamedParallelizer>& parallelizers,
                                          const PipelineSplitter* pipeline) {
  std::vector<MeshDimRequest> requests;
  if (pipeline) requests = pipeline->mesh_dims();
  for (const auto& item : parallelizers) {
    for (const auto& request : item.parallelizer->mesh_dims()) requests.push_back(request);
  }
  return requests;
}

std::vector<MeshDimRequest> mesh_requests(const RunSpec& spec) {
  return mesh_requests(spec.parallelizers, spec.pipeline.get());
}

std::vector<MeshSplitRequest> mesh_splits(const RunSpec& spec) {
  std::vector<MeshSplitRequest> splits;
  for (const auto& item : spec.parallelizers) {
    for (const auto& split : item.parallelizer->mesh_splits()) splits.push_back(split);
  }
  return splits;
}

std::map<std::string, int64_t> requested_degrees(const RunSpec& spec) {
  std::map<std::string, int64_t> degrees;
  for (const auto& request : mesh_requests(spec)) {
    if (request.degree > 0) degrees[request.dim] = request.degree;
  }
  return degrees;
}

RunSpec resolve_run(const ConfigNode& root, int rank, int world_size) {
  RunSpec spec;
  spec.root = root;
  spec.core = read_core_config(root);
  auto& registry = PluginRegistry::instance();
  for (const auto& dir : spec.core.job.plugin_path) registry.add_search_dir(dir);
  auto make_context = [&](const ConfigNode& options) { return context_for(options, spec.core, rank, world_size); };
  // A section's plugin: its `name`, or the build's default for the section.
  auto section_plugin = [&](const ConfigNode& section, const std::string& key, const std::string& what) {
    return section.get<std::string>("name", PluginRegistry::default_plugin(key), what);
  };

  ConfigNode model = root.child("model");
  spec.model_plugin = section_plugin(model, "model", "model plugin");
  model.get<std::string>("tokenizer_path", "", "");  // read by read_core_config
  spec.model = registry.create_model(spec.model_plugin, make_context(model));

  ConfigNode optimizer = root.child("optimizer");
  std::string optimizer_plugin = lowercase(section_plugin(optimizer, "optimizer", "optimizer plugin (AdamW -> adamw)"));
  spec.optimizer = registry.create_optimizer(optimizer_plugin, make_context(optimizer));

  ConfigNode lr = root.child("lr_scheduler");
  spec.lr_schedule = registry.create_lr_schedule(section_plugin(lr, "lr_scheduler", "LR schedule plugin"), make_context(lr));

  ConfigNode checkpoint = root.child("checkpoint");
  // The job's folder, not this replica group's: the groups share checkpoints.
  PluginContext checkpoint_context = make_context(checkpoint);
  checkpoint_context.dump_folder = spec.core.job.dump_folder;
  spec.checkpointer =
      registry.create_checkpointer(section_plugin(checkpoint, "checkpoint", "checkpointer plugin"), checkpoint_context);

  spec.metrics_sinks = switched_metrics_sinks(root.child("metrics"), make_context);

  for (const ConfigNode& entry : root.children("plugins")) {
    std::string name = entry.require<std::string>("name", "plugin name");
    const PluginInfo& info = registry.load(name);
    uint32_t selectable = kind_model | kind_optimizer | kind_lr_schedule | kind_checkpointer;
    if ((info.kinds & ~selectable) == 0) {
      entry.fail("name", "plugin '" + name + "' provides " + kinds_to_string(info.kinds) +
                             ", which is chosen by its own section (model.name, optimizer.name, "
                             "lr_scheduler.name, checkpoint.name), not in plugins:");
    }
    auto context = make_context(entry);
    if (info.kinds & kind_parallelizer) {
      spec.parallelizers.push_back({name, registry.create_parallelizer(name, context)});
    }
    if (info.kinds & kind_pipeline_splitter) {
      if (spec.pipeline) entry.fail("name", "a second pipeline split ('" + name + "'); list one pipeline plugin");
      spec.pipeline = registry.create_pipeline_splitter(name, context);
    }
    if (info.kinds & kind_microbatch_runner) {
      if (spec.microbatch_runner) {
        entry.fail("name", "a second microbatch_runner plugin ('" + name + "'); list only one");
      }
      spec.microbatch_runner = registry.create_microbatch_runner(name, context);
    }
    if (info.kinds & kind_precision) {
      if (spec.precision) entry.fail("name", "a second precision plugin ('" + name + "'); list only one");
      spec.precision = registry.create_precision(name, context);
    }
    if (info.kinds & kind_comm_observer) spec.comm_observers.push_back(registry.create_comm_observer(name, context));
    if (info.kinds & kind_metrics_sink) spec.metrics_sinks.push_back(registry.create_metrics_sink(name, context));
  }
  sort_canonical(spec.parallelizers);
  if (spec.pipeline) {
    if (spec.microbatch_runner) {
      throw Error("plugins: a microbatch_runner plugin and the pipeline split both drive the step; list one");
    }
    if (spec.pipeline->settings().schedule_csv.empty()) {
      PluginContext context = make_context(ConfigNode());
      spec.pipeline_schedule = registry.create_pipeline_schedule(spec.pipeline->settings().schedule, context);
    }
  }
  root.check_unknown_keys();
  return spec;
}

}  // namespace titan
