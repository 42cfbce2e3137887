// The split on a meta-device build of the model (no parameter memory), so
// `titan config check` can refuse a split of a 405B model on a laptop.
#include "pipeline_splitter.h"

#include <algorithm>

namespace titan::pipeline {

std::vector<std::vector<std::string>> StageSplitter::stage_modules(const ModelSpec& spec,
                                                                   int64_t default_stages) const {
  std::shared_ptr<CausalLM> model = spec.build(c10::Device(c10::kMeta));
  const ModelLayout layout = read_layout(*model, spec.flavor());
  if (!options_.module_fqns_per_model_part.empty()) {
    return check_parts(*model, layout, options_.module_fqns_per_model_part);
  }
  return split_by_rule(layout, options_.split, default_stages);
}

void StageSplitter::validate(const ValidateContext& context) const {
  // Only what the schedule does not decide: core checks the stage count
  // against pipeline_parallel_schedule (stages per rank, microbatches).
  auto found = context.degrees.find("pp");
  const int64_t pp = found == context.degrees.end() ? 0 : found->second;  // 0: not known yet
  const bool fixed_by_options = !options_.module_fqns_per_model_part.empty() || options_.split.layers_per_stage > 0;
  if (!fixed_by_options && pp <= 1) return;
  stage_modules(context.spec, std::max<int64_t>(pp, 1));
}

}  // namespace titan::pipeline
