// Builds a pipelined run's model: one part per stage this pp rank holds, each
// cut on the meta device and transformed by the other parallelizers, seen as
// one ModelParts, with the executor that drives the parts.
#pragma once
#include <functional>
#include <memory>

#include "model_parts.hpp"
#include "pipeline_executor.hpp"
#include "titan/device_mesh.hpp"
#include "titan/run_spec.hpp"

namespace titan {

struct PipelineModel {
  std::shared_ptr<ModelParts> model;  // materialized, not yet initialized
  std::unique_ptr<PipelineExecutor> executor;
};

// `run`: the stages and action lists validate_parallelism compiled.
// `transform` applies the precision conversion and every parallelizer but
// the pipeline split to one part (on meta).
PipelineModel build_pipeline_model(const RunSpec& spec, const PipelineRun& run, const DeviceMesh* mesh,
                                   int global_rank, const c10::Device& device,
                                   const std::function<void(CausalLM&)>& transform);

// debug.save_final_model under pipelining: pp rank 0 of each group receives
// the other stages' whole tensors (collective over pp; a no-op without pp).
void gather_pipeline_stages(c10::Dict<std::string, at::Tensor>& tensors, const DeviceMesh* mesh);

}  // namespace titan
