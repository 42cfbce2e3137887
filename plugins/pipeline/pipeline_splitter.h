// StageSplitter: the `pipeline` plugin's PipelineSplitter. It only says which
// modules each stage holds and carries the schedule settings; core cuts the
// model into stages and runs the schedule (titan/pipeline.hpp).
#pragma once
#include <string>
#include <vector>

#include "stage_split.h"
#include "titan/pipeline.hpp"

namespace titan::pipeline {

struct PipelineOptions {
  PipelineSettings settings;  // degree -1: the rest of the world
  SplitOptions split;
  std::vector<std::vector<std::string>> module_fqns_per_model_part;  // empty: split by the rule
};

class StageSplitter : public PipelineSplitter {
 public:
  explicit StageSplitter(PipelineOptions options) : options_(std::move(options)) {}
  std::vector<MeshDimRequest> mesh_dims() const override { return {{"pp", options_.settings.degree}}; }
  void validate(const ValidateContext& context) const override;
  const PipelineSettings& settings() const override { return options_.settings; }
  std::vector<std::vector<std::string>> stage_modules(const ModelSpec& spec, int64_t default_stages) const override;

 private:
  PipelineOptions options_;
};

}  // namespace titan::pipeline
