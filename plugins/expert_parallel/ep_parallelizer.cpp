// Expert parallelism applied: the checks (degrees, the model's experts),
// then per MoE layer the routed experts' weights cut to this rank's
// experts on the meta model and the all-to-all dispatcher swapped in.
#include "ep_parallelizer.h"

#include <ATen/ATen.h>

#include "ep_dispatcher.h"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"

namespace titan::expert_parallel {

namespace {

const char* const kDegreeKey = "plugins: expert_parallel.expert_parallel_degree";

int64_t degree_of(const std::map<std::string, int64_t>& degrees, const std::string& dim, int64_t absent) {
  auto found = degrees.find(dim);
  return found == degrees.end() ? absent : found->second;
}

}  // namespace

std::vector<MeshSplitRequest> ExpertParallelizer::mesh_splits() const {
  if (options_.degree == 1) return {};
  return {{"dp_shard_cp_tp", "efsdp", "ep", options_.degree}};
}

void ExpertParallelizer::validate(const ValidateContext& context) const {
  const int64_t ep = options_.degree;
  const std::string key = std::string(kDegreeKey) + " = " + std::to_string(ep);
  // ep borrows its ranks from dp_shard x cp x tp (TorchTitan's ep without
  // expert tensor parallelism); unknown without a world size.
  const int64_t dp_shard = degree_of(context.degrees, "dp_shard", -1), cp = degree_of(context.degrees, "cp", 1),
                tp = degree_of(context.degrees, "tp", 1);
  const int64_t borrowable = dp_shard * cp * tp;
  if (ep > 1 && dp_shard > 0 && borrowable % ep != 0) {
    throw Error(key + " does not divide data_parallel_shard_degree x context_parallel_degree x "
                "tensor_parallel_degree = " + std::to_string(dp_shard) + " x " + std::to_string(cp) + " x " +
                std::to_string(tp) + " = " + std::to_string(borrowable) +
                " (expert parallelism takes its ranks from them, as TorchTitan); use a divisor of " +
                std::to_string(borrowable) + ", or more FSDP ranks (fsdp.dp_shard)");
  }
  // The model's MoE layers, from a meta build (no memory, no weights).
  std::shared_ptr<CausalLM> model = context.spec.build(c10::Device(c10::kMeta));
  auto layers = find_moe_layers(*model);
  if (layers.empty()) {
    throw Error(std::string(kDegreeKey) + ": model flavor '" + context.spec.flavor() +
                "' has no MoE layers, so there are no experts to split; use a MoE flavor (e.g. qwen3 "
                "debugmodel_moe) or remove the expert_parallel plugin");
  }
  for (const auto& [path, moe] : layers) {
    const int64_t experts = moe->options().num_experts;
    if (experts % ep != 0) {
      throw Error(key + " does not divide the " + std::to_string(experts) + " routed experts of " + path +
                  " (model.num_experts); each ep rank holds num_experts / expert_parallel_degree of them: use a "
                  "degree dividing " + std::to_string(experts));
    }
  }
}

void ExpertParallelizer::parallelize(CausalLM& model, const ParallelizeContext& context) {
  if (options_.degree == 1) {
    spdlog::info("expert_parallel: expert_parallel_degree = 1, experts stay whole on every rank");
    return;
  }
  if (!context.mesh) throw Error("expert_parallel: no device mesh (the trainer builds one when a plugin asks for mesh dims)");
  Comm& ep = context.mesh->group("ep");
  const int64_t ranks = ep.size(), rank = ep.rank();
  auto layers = find_moe_layers(model);
  if (layers.empty()) throw Error(std::string(kDegreeKey) + ": the model has no MoE layers");
  for (const auto& [path, moe] : layers) {
    auto experts = std::dynamic_pointer_cast<RoutedExperts>(find_module(model, path + ".experts"));
    if (!experts) throw Error("expert_parallel: " + path + ".experts is not a titan::RoutedExperts layer");
    // Every parameter of the experts is [E, ...] (weights and, e.g. GPT-OSS's, biases).
    for (const auto& item : experts->named_parameters(/*recurse=*/false)) {
      const std::string name = path + ".experts." + item.key();
      const at::Tensor param = item.value();
      if (!param.is_meta()) {
        throw Error("expert_parallel: parameter '" + name + "' is already materialized; EP must run on the meta model");
      }
      if (model.layout(name)) {
        throw Error("expert_parallel: parameter '" + name + "' is already distributed (" +
                    model.layout(name)->describe() + "); apply expert parallelism before other sharding");
      }
      // Experts [rank * local, (rank + 1) * local) of dim 0, Shard(0) over ep.
      TensorLayout layout = TensorLayout::replicated(param.sizes().vec());
      const int64_t local = layout.global_shape[0] / ranks;
      layout.local_shape[0] = local;
      layout.local_offset[0] = rank * local;
      layout.mesh_dims = {"ep"};
      layout.placements = {Placement::shard(0)};
      param.set_data(at::empty(layout.local_shape, param.options()));
      model.set_layout(name, layout);
    }
    swap_module(model, path + ".dispatcher", std::make_shared<AllToAllDispatcher>(ep, path));
  }
  spdlog::info("expert_parallel: routed experts of {} MoE layers split over ep={} (this rank holds {} of {} each), "
               "tokens dispatched by all-to-all; mesh {}",
               layers.size(), ranks, layers.front().second->options().num_experts / ranks,
               layers.front().second->options().num_experts, context.mesh->describe());
}

}  // namespace titan::expert_parallel
