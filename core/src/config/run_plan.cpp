// Plans a run: core sections, plugin selection and creation, unknown keys.
#include "titan/run_plan.hpp"

#include <algorithm>
#include <cctype>

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
  context.dump_folder = core.job.dump_folder;
  context.rank = rank;
  context.world_size = world_size;
  context.training_steps = core.training.steps;
  return context;
}

}  // namespace

void sort_canonical(std::vector<NamedParallelizer>& parallelizers) {
  std::stable_sort(parallelizers.begin(), parallelizers.end(), [](const auto& a, const auto& b) {
    return static_cast<int>(a.parallelizer->apply_order()) < static_cast<int>(b.parallelizer->apply_order());
  });
}

std::optional<PipelineRun> validate_parallelism(const RunPlan& plan, const std::map<std::string, int64_t>& degrees) {
  std::vector<ApplyOrder> apply_orders;
  for (const auto& item : plan.parallelizers) apply_orders.push_back(item.parallelizer->apply_order());
  ValidateContext context{*plan.model, degrees, plan.core.training.seq_len, apply_orders};
  for (const auto& [name, parallelizer] : plan.parallelizers) parallelizer->validate(context);
  // The stages and every pp rank's action lists are planned and statically
  // checked here, once per run, so a pipeline that cannot run fails in
  // `titan config check` and before any group exists in training.
  std::optional<PipelineRun> pipeline_run;
  auto pp = degrees.find("pp");
  if (plan.pipeline && pp != degrees.end()) pipeline_run = plan_pipeline_run(plan, pp->second);
  return pipeline_run;
}

std::vector<MeshDimRequest> mesh_requests(const std::vector<NamedParallelizer>& parallelizers) {
  std::vector<MeshDimRequest> requests;
  for (const auto& item : parallelizers) {
    for (const auto& request : item.parallelizer->mesh_dims()) requests.push_back(request);
  }
  return requests;
}

std::map<std::string, int64_t> requested_degrees(const RunPlan& plan) {
  std::map<std::string, int64_t> degrees;
  for (const auto& request : mesh_requests(plan.parallelizers)) {
    if (request.degree > 0) degrees[request.dim] = request.degree;
  }
  return degrees;
}

RunPlan plan_run(const ConfigNode& root, int rank, int world_size) {
  RunPlan plan;
  plan.root = root;
  plan.core = read_core_config(root);
  auto& registry = PluginRegistry::instance();
  for (const auto& dir : plan.core.job.plugin_path) registry.add_search_dir(dir);
  auto make_context = [&](const ConfigNode& options) { return context_for(options, plan.core, rank, world_size); };

  ConfigNode model = root.child("model");
  plan.model_plugin = model.get<std::string>("name", "llama3", "model plugin");
  model.get<std::string>("tokenizer_path", "", "");  // read by read_core_config
  plan.model = registry.create_model(plan.model_plugin, make_context(model));

  ConfigNode optimizer = root.child("optimizer");
  std::string optimizer_plugin = lowercase(optimizer.get<std::string>("name", "adamw", "optimizer plugin (AdamW -> adamw)"));
  plan.optimizer = registry.create_optimizer(optimizer_plugin, make_context(optimizer));

  ConfigNode lr = root.child("lr_scheduler");
  std::string lr_plugin = lr.get<std::string>("name", "lr_schedules", "LR schedule plugin");
  plan.lr_schedule = registry.create_lr_schedule(lr_plugin, make_context(lr));

  ConfigNode checkpoint = root.child("checkpoint");
  std::string checkpoint_plugin = checkpoint.get<std::string>("name", "dcp", "checkpointer plugin");
  plan.checkpointer = registry.create_checkpointer(checkpoint_plugin, make_context(checkpoint));

  if (plan.core.metrics.enable_tensorboard) {
    ConfigNode metrics = root.child("metrics");
    plan.metrics_sinks.push_back(registry.create_metrics_sink("tensorboard", make_context(metrics)));
  }

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
      plan.parallelizers.push_back({name, registry.create_parallelizer(name, context)});
    }
    if (info.kinds & kind_schedule) {
      if (plan.schedule) entry.fail("name", "a second schedule plugin ('" + name + "'); list only one");
      plan.schedule = registry.create_schedule(name, context);
    }
    if (info.kinds & kind_precision) {
      if (plan.precision) entry.fail("name", "a second precision plugin ('" + name + "'); list only one");
      plan.precision = registry.create_precision(name, context);
    }
    if (info.kinds & kind_comm_observer) plan.comm_observers.push_back(registry.create_comm_observer(name, context));
    if (info.kinds & kind_metrics_sink) plan.metrics_sinks.push_back(registry.create_metrics_sink(name, context));
  }
  sort_canonical(plan.parallelizers);
  for (const auto& [name, parallelizer] : plan.parallelizers) {
    auto splitter = dynamic_cast<const PipelineSplitter*>(parallelizer.get());
    if (!splitter) continue;
    if (plan.pipeline) {
      throw Error("plugins: '" + name + "' is a second pipeline split; list one pipeline plugin");
    }
    if (plan.schedule) throw Error("plugins: a schedule plugin and the pipeline split '" + name + "' both drive the step; list one");
    plan.pipeline = splitter;
    if (splitter->settings().schedule_csv.empty()) {
      PluginContext context = make_context(ConfigNode());
      plan.pipeline_schedule = registry.create_pipeline_schedule(splitter->settings().schedule, context);
    }
  }
  root.check_unknown_keys();
  return plan;
}

}  // namespace titan
