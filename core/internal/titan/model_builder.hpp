// How every Titan model is built, by the trainer and by titan-conformance
// alike: on the meta device, then the precision conversion and every
// parallelizer in canonical order (the pipeline split excepted: the
// pipeline cuts parts first and each part goes through this), then
// materialized. So no rank ever holds more than its shards.
#pragma once
#include <memory>
#include <vector>

#include "titan/model.hpp"
#include "titan/parallelizer.hpp"
#include "titan/precision.hpp"
#include "titan/run_spec.hpp"

namespace titan {

// Applies `precision` (may be null) and `parallelizers` (canonical order)
// to a model or pipeline part still on the meta device.
void apply_plugins(CausalLM& model, const std::vector<NamedParallelizer>& parallelizers, PrecisionPolicy* precision,
                   const ParallelizeContext& context);

// `spec`'s model built on meta, apply_plugins, then materialized on
// context.device; its weights are not initialized yet.
std::shared_ptr<CausalLM> build_model(const ModelSpec& spec, const std::vector<NamedParallelizer>& parallelizers,
                                      PrecisionPolicy* precision, const ParallelizeContext& context);

}  // namespace titan
