// Pipeline parallelism's seam in core: the plugin kind that says how the
// model is cut into stages (kind_pipeline_splitter, e.g. the `pipeline`
// plugin) and the settings core's executor runs them with. Core builds one
// model part per stage this rank holds (cut_to_stage), applies the
// parallelizers to each part, and drives the parts with the schedule's
// checked action lists.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/parallelizer.hpp"

namespace titan {

// What the pipeline plugin read from its entry (TorchTitan's parallelism.* names).
struct PipelineSettings {
  int64_t degree = 1;               // pipeline_parallel_degree: the pp mesh dim
  std::string schedule;             // pipeline_parallel_schedule (case-insensitive); the plugin's default
  std::string schedule_csv;         // pipeline_parallel_schedule_csv: a user's lists ("" none)
  int64_t microbatch_size = 1;      // pipeline_parallel_microbatch_size
  int64_t microbatches = 0;         // num_pp_microbatches: 0 = local_batch_size / microbatch_size
  std::string trace;                // pipeline_parallel_trace: Chrome-trace JSON path prefix ("" none)
};

// Not a Parallelizer: it transforms no model. Core cuts the model by its
// stage_modules() before any parallelizer runs (TorchTitan's order: the
// pipeline split first).
class PipelineSplitter {
 public:
  virtual ~PipelineSplitter();
  // The pp dim (and any other) it asks for, as Parallelizer::mesh_dims.
  virtual std::vector<MeshDimRequest> mesh_dims() const = 0;
  // As Parallelizer::validate: throws naming the key when the model cannot be split.
  virtual void validate(const ValidateContext& /*context*/) const {}
  virtual const PipelineSettings& settings() const = 0;
  // The module paths each stage keeps, in stage order: top-level modules and
  // blocks ("tok_embeddings", "layers.0", "layers.1" | "layers.2", "norm",
  // "output"). `default_stages` is the count when the plugin's options leave
  // it open (pp degree x the stages per rank the schedule runs). Throws
  // titan::Error naming the option when the layers do not split.
  virtual std::vector<std::vector<std::string>> stage_modules(const ModelSpec& spec, int64_t default_stages) const = 0;
};

// Drops from `model` (still on the meta device) every module that is not on
// one of the `keep` paths or on the way to one ("layers" stays for
// "layers.3"); parameter names keep their global spelling. Throws naming a
// path in `keep` the model does not have.
void cut_to_stage(torch::nn::Module& model, const std::vector<std::string>& keep);

}  // namespace titan
