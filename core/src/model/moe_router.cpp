// The MoE router (TorchTitan's TokenChoiceTopKRouter) and the checks of the
// MoE options it and the layer share.
#include <torch/csrc/autograd/graph_task.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "titan/error.hpp"
#include "titan/host_to_device.hpp"
#include "titan/moe.hpp"
#include "titan/module_path.hpp"

namespace titan {

std::pair<std::string, std::string> find_moe_problem(const MoEOptions& o, int64_t dim) {
  auto text = [](int64_t value) { return std::to_string(value); };
  if (dim <= 0) return {"dim", "must be positive"};
  if (o.num_experts <= 0) return {"num_experts", "must be positive, got " + text(o.num_experts)};
  if (o.top_k <= 0 || o.top_k > o.num_experts)
    return {"top_k", "must be in [1, num_experts = " + text(o.num_experts) + "], got " + text(o.top_k)};
  if (o.hidden_dim <= 0) return {"moe_hidden_dim", "must be positive, got " + text(o.hidden_dim)};
  if (o.num_shared_experts < 0) return {"num_shared_experts", "must be >= 0, got " + text(o.num_shared_experts)};
  if (o.route_scale <= 0) return {"route_scale", "must be > 0, got " + std::to_string(o.route_scale)};
  if (o.token_group_alignment < 0)
    return {"token_group_alignment", "must be >= 0 (0: the backend's own), got " + text(o.token_group_alignment)};
  if (o.num_expert_groups > 0) {
    if (o.num_experts % o.num_expert_groups != 0)
      return {"num_expert_groups", "num_experts " + text(o.num_experts) + " is not divisible by num_expert_groups " +
                                       text(o.num_expert_groups)};
    if (o.num_experts / o.num_expert_groups < 2)
      return {"num_expert_groups", "each group needs at least 2 experts (groups are ranked by their top 2 scores); "
                                   "use at most " + text(o.num_experts / 2) + " groups"};
    if (o.num_limited_groups <= 0 || o.num_limited_groups > o.num_expert_groups)
      return {"num_limited_groups", "must be in [1, num_expert_groups = " + text(o.num_expert_groups) +
                                        "] when num_expert_groups is set, got " + text(o.num_limited_groups)};
    if (o.num_limited_groups * (o.num_experts / o.num_expert_groups) < o.top_k)
      return {"num_limited_groups", text(o.num_limited_groups) + " groups of " +
                                        text(o.num_experts / o.num_expert_groups) + " experts cannot hold top_k " +
                                        text(o.top_k) + " experts"};
  } else if (o.num_limited_groups > 0) {
    return {"num_limited_groups", "needs num_expert_groups > 0 (group-limited routing)"};
  }
  if (!o.forced_experts.empty()) {
    if (static_cast<int64_t>(o.forced_experts.size()) < o.top_k)
      return {"moe_force_experts", "lists " + text(static_cast<int64_t>(o.forced_experts.size())) +
                                       " experts, fewer than top_k " + text(o.top_k) + " (a token's experts differ)"};
    std::vector<int64_t> seen;
    for (int64_t e : o.forced_experts) {
      if (e < 0 || e >= o.num_experts)
        return {"moe_force_experts", "expert " + text(e) + " is not in [0, num_experts = " + text(o.num_experts) + ")"};
      if (std::find(seen.begin(), seen.end(), e) != seen.end())
        return {"moe_force_experts", "lists expert " + text(e) + " twice"};
      seen.push_back(e);
    }
    if (o.force_load_balance) return {"moe_force_experts", "and moe_force_load_balance both force the routing: set one"};
  }
  return {};
}

Router::Router(int64_t dim, const MoEOptions& options, const at::TensorOptions& tensor_options)
    : options_(options) {
  register_module("gate", std::make_shared<Linear>(dim, options.num_experts, tensor_options, options.router_bias));
  // Counts and the bias stay fp32 whatever the model's dtype (TorchTitan's).
  auto fp32 = tensor_options.dtype(at::kFloat);
  tokens_per_expert = register_buffer("tokens_per_expert", at::zeros({options.num_experts}, fp32));
  if (options.load_balance_coeff > 0) {
    expert_bias = register_buffer("expert_bias", at::zeros({options.num_experts}, fp32));
  }
}

void Router::reset_buffers() {
  at::NoGradGuard no_grad;
  tokens_per_expert.zero_();
  if (expert_bias.defined()) expert_bias.zero_();
}

namespace {

// Experts outside the num_limited_groups best groups (ranked by the sum of
// their top two scores) get -inf, so top-k never picks them.
at::Tensor limit_to_groups(const at::Tensor& scores, const MoEOptions& o) {
  int64_t per_group = o.num_experts / o.num_expert_groups;
  at::Tensor grouped = scores.view({-1, o.num_expert_groups, per_group});
  at::Tensor group_scores = std::get<0>(grouped.topk(2, -1)).sum(-1);
  at::Tensor kept = std::get<1>(group_scores.topk(o.num_limited_groups, -1, /*largest=*/true, /*sorted=*/false));
  at::Tensor dropped = at::ones_like(group_scores, group_scores.options().dtype(at::kBool)).scatter_(1, kept, false);
  return grouped.masked_fill(dropped.unsqueeze(-1), -std::numeric_limits<double>::infinity())
      .view({-1, o.num_experts});
}

// A recompute inside a backward (activation checkpointing) must not count
// the same tokens again: the engine runs it within a graph task.
bool first_forward() { return torch::autograd::get_current_graph_task_id() == -1; }

}  // namespace

Routing Router::forward(const at::Tensor& x) {
  const MoEOptions& o = options_;
  // The gate in fp32 for stable routing (TorchTitan autocasts it).
  auto gate = child_layer(*this, "gate");
  auto plain = std::dynamic_pointer_cast<Linear>(gate);
  at::Tensor bias = plain && plain->bias.defined() ? plain->bias.to(at::kFloat) : at::Tensor();
  at::Tensor logits = plain ? at::linear(x.to(at::kFloat), plain->weight.to(at::kFloat), bias)
                            : gate->forward(x).to(at::kFloat);
  at::Tensor scores = o.score_func == RouterScore::softmax ? at::softmax(logits, 1) : at::sigmoid(logits);
  Routing routing;
  if (o.force_load_balance || !o.forced_experts.empty()) {
    // Round-robin over every expert (exactly balanced) or the listed ones,
    // whatever the scores. top_k consecutive picks are distinct experts.
    at::Tensor slots = at::arange(x.size(0) * o.top_k, scores.options().dtype(at::kLong)).view({-1, o.top_k});
    if (o.force_load_balance) {
      routing.selected = slots % o.num_experts;
    } else {
      at::Tensor experts = host_to_device(at::tensor(o.forced_experts, at::kLong), slots.device());
      routing.selected = experts.index_select(0, (slots % experts.size(0)).view(-1)).view(slots.sizes());
    }
  } else {
    at::Tensor for_choice = expert_bias.defined() ? scores + expert_bias : scores;
    if (o.num_expert_groups > 0) for_choice = limit_to_groups(for_choice, o);
    routing.selected = std::get<1>(for_choice.topk(o.top_k, -1, /*largest=*/true, /*sorted=*/false));
  }
  // The bias only steers the choice: gate values come from the scores.
  at::Tensor top = scores.gather(1, routing.selected);
  if (o.route_norm) top = top / (top.sum(-1, /*keepdim=*/true) + 1e-20);
  routing.top_scores = top * o.route_scale;
  if (first_forward()) {
    at::NoGradGuard no_grad;
    tokens_per_expert.add_(count_per_expert(routing.selected, o.num_experts).to(at::kFloat));
  }
  return routing;
}

at::Tensor expert_bias_delta(const at::Tensor& counts, double coeff) {
  at::Tensor c = counts.to(at::kFloat);
  at::Tensor delta = coeff * at::sign(c.mean() - c);
  return delta - delta.mean();
}

void Router::update_expert_bias(const at::Tensor& counts) {
  at::NoGradGuard no_grad;
  if (expert_bias.defined()) expert_bias.add_(expert_bias_delta(counts.to(expert_bias.device()), options_.load_balance_coeff));
  tokens_per_expert.zero_();
}

}  // namespace titan
