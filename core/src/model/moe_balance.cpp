// Auxiliary-loss-free load balancing over a whole model (TorchTitan's
// _update_expert_bias): every router's counts of the step, summed over the
// data-parallel ranks in one collective, update its expert bias; the loads
// become metrics.
#include <ATen/ATen.h>

#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/moe.hpp"

namespace titan {

std::vector<std::pair<std::string, std::shared_ptr<Router>>> find_routers(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<Router>>> routers;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (auto router = std::dynamic_pointer_cast<Router>(item.value())) routers.emplace_back(item.key(), router);
  }
  return routers;
}

void reset_router_buffers(const torch::nn::Module& model, const std::string& model_name) {
  for (auto& [path, router] : find_routers(model)) {
    // A router on meta (another pipeline stage's) cannot be in a materialized model.
    if (router->tokens_per_expert.is_meta()) {
      throw Error(model_name + ": " + path + "'s buffers are still on the meta device");
    }
    router->reset_buffers();
  }
}

std::vector<RouterLoad> balance_experts(const torch::nn::Module& model, const CountReduction& reduce,
                                        bool read_loads) {
  auto routers = find_routers(model);
  std::vector<RouterLoad> loads;
  if (routers.empty()) return loads;
  std::vector<at::Tensor> rows;
  for (const auto& [path, router] : routers) rows.push_back(router->tokens_per_expert);
  // Routers may differ in expert count: pad to the widest, one collective.
  int64_t widest = 0;
  for (const auto& row : rows) widest = std::max(widest, row.size(0));
  at::Tensor counts = at::zeros({static_cast<int64_t>(rows.size()), widest}, rows.front().options());
  for (size_t i = 0; i < rows.size(); ++i) counts[static_cast<int64_t>(i)].narrow(0, 0, rows[i].size(0)).copy_(rows[i]);
  if (reduce) reduce(counts);
  for (size_t i = 0; i < routers.size(); ++i) {
    auto& [path, router] = routers[i];
    at::Tensor mine = counts[static_cast<int64_t>(i)].narrow(0, 0, rows[i].size(0));
    router->update_expert_bias(mine);
    if (!read_loads) continue;
    RouterLoad load;
    load.path = path;
    double mean = mine.mean().item<double>();
    load.imbalance = mean > 0 ? mine.max().item<double>() / mean : 0.0;
    load.expert_bias_norm = router->expert_bias.defined() ? router->expert_bias.norm().item<double>() : 0.0;
    loads.push_back(load);
  }
  return loads;
}

// Every data-parallel copy's counts: the mesh's dp_cp ranks, then (under
// fault tolerance) the other replica groups.
CountReduction sum_over_data_parallel(const StepHookContext& context) {
  return [context](at::Tensor& counts) {
    // On the counts' device (NCCL on CUDA): integers in fp32 sum exactly.
    if (context.mesh && context.mesh->size("dp_cp") > 1) {
      context.mesh->group("dp_cp").all_reduce(counts, ReduceOp::sum);
    }
    if (context.sum_over_replica_groups) context.sum_over_replica_groups(counts);
  };
}

std::map<std::string, double> moe_metrics(const std::vector<RouterLoad>& loads) {
  std::map<std::string, double> metrics;
  for (const auto& load : loads) {
    metrics["moe/" + load.path + "/imbalance"] = load.imbalance;
    metrics["moe/" + load.path + "/expert_bias_norm"] = load.expert_bias_norm;
  }
  return metrics;
}

void add_moe_step_hook(CausalLM& model) {
  if (find_routers(model).empty()) return;
  // The model owns the hook: the pointer lives as long as it is called.
  const CausalLM* self = &model;
  StepHook hook;
  hook.name = "MoE load balancing";
  hook.before_optimizer = [self](const StepHookContext& context) {
    return moe_metrics(
        balance_experts(*self, sum_over_data_parallel(context), /*read_loads=*/context.log_step));
  };
  hook.state = [self] {
    std::map<std::string, at::Tensor> state;
    for (const auto& [path, router] : find_routers(*self)) {
      if (router->expert_bias.defined()) state[path + ".expert_bias"] = router->expert_bias;
    }
    return state;
  };
  hook.host_driven = "MoE routing sizes each expert's rows from token counts the host reads every step";
  model.add_step_hook(std::move(hook));
}

}  // namespace titan
