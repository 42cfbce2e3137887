#include "titan/model_builder.hpp"

#include "titan/logging.hpp"

namespace titan {

void apply_plugins(CausalLM& model, const std::vector<NamedParallelizer>& parallelizers, PrecisionPolicy* precision,
                   const ParallelizeContext& context) {
  bool converted = false;
  for (const auto& [name, parallelizer] : parallelizers) {
    // The precision conversion has its own place in the canonical order.
    if (!converted && parallelizer->apply_order() > ApplyOrder::precision_conversion) {
      if (precision) precision->convert(model);
      converted = true;
    }
    spdlog::info("applying {} ({})", name, apply_order_name(parallelizer->apply_order()));
    parallelizer->parallelize(model, context);
  }
  if (!converted && precision) precision->convert(model);
}

std::shared_ptr<CausalLM> build_model(const ModelSpec& spec, const std::vector<NamedParallelizer>& parallelizers,
                                      PrecisionPolicy* precision, const ParallelizeContext& context) {
  std::shared_ptr<CausalLM> model = spec.build(c10::Device(c10::kMeta));
  apply_plugins(*model, parallelizers, precision, context);
  materialize_module(*model, context.device);
  return model;
}

}  // namespace titan
