// A run, resolved: the config read and checked, every plugin loaded and its
// object created (factories only parse options; nothing heavy happens), the
// parallelizers sorted into the canonical order. `titan config check` stops
// here; `titan train` hands the spec to the trainer.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/checkpointer.hpp"
#include "titan/comm_observer.hpp"
#include "titan/config.hpp"
#include "titan/job_config.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/model.hpp"
#include "titan/optimizer.hpp"
#include "titan/parallelizer.hpp"
#include "titan/pipeline.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/precision.hpp"
#include "titan/microbatch_runner.hpp"

namespace titan {

struct NamedParallelizer {
  std::string plugin;
  std::unique_ptr<Parallelizer> parallelizer;
};

struct RunSpec {
  ConfigNode root;
  CoreConfig core;
  std::string model_plugin;
  std::unique_ptr<ModelSpec> model;
  std::unique_ptr<OptimizerFactory> optimizer;
  std::unique_ptr<LrSchedule> lr_schedule;
  std::unique_ptr<Checkpointer> checkpointer;
  std::vector<NamedParallelizer> parallelizers;  // canonical order
  std::unique_ptr<MicrobatchRunner> microbatch_runner;            // null: gradient accumulation
  // The plugin that cuts the model into stages (null: no pipeline) and its
  // schedule by name (null when it runs a CSV).
  std::unique_ptr<PipelineSplitter> pipeline;
  std::unique_ptr<PipelineSchedule> pipeline_schedule;
  std::unique_ptr<PrecisionPolicy> precision;    // null: float32
  std::vector<std::unique_ptr<MetricsSink>> metrics_sinks;
  std::vector<std::unique_ptr<CommObserver>> comm_observers;
};

RunSpec resolve_run(const ConfigNode& root, int rank = 0, int world_size = 1);

// Every mesh dim the pipeline split and the parallelizers ask for, in their order.
std::vector<MeshDimRequest> mesh_requests(const std::vector<NamedParallelizer>& parallelizers,
                                          const PipelineSplitter* pipeline = nullptr);
std::vector<MeshDimRequest> mesh_requests(const RunSpec& spec);
// The dims the parallelizers declare over the dense ones (e.g. ep).
std::vector<MeshSplitRequest> mesh_splits(const RunSpec& spec);
// The degrees known without a world: those asked for explicitly (> 0).
std::map<std::string, int64_t> requested_degrees(const RunSpec& spec);

// A pipelined run's stages (module paths per stage) and every pp rank's
// checked action lists for a pp degree; throws titan::Error naming the key.
struct PipelineRun {
  std::vector<std::vector<std::string>> stage_modules;
  PipelineProgram program;
};
PipelineRun resolve_pipeline_run(const RunSpec& spec, int64_t pp_degree);

// Every parallelizer's validate() on the model (its vocabulary already set)
// and `degrees` (resolved; see ValidateContext), and the pipeline resolved
// and statically checked when pp is known (returned; empty without pp),
// before any weight exists.
std::optional<PipelineRun> validate_parallelism(const RunSpec& spec, const std::map<std::string, int64_t>& degrees);

// Sorts by ApplyOrder, keeping the user's order among plugins of the same
// place.
void sort_canonical(std::vector<NamedParallelizer>& parallelizers);

}  // namespace titan
