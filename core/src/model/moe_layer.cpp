// The MoE layer's forward (TorchTitan's MoE.forward) and the local token
// dispatcher: tokens sorted by expert (stable, so the order is fixed) and
// put back by index, one place per row, so the combine is deterministic.
#include <ATen/ATen.h>

#include <typeinfo>

#include "titan/error.hpp"
#include "titan/feed_forward.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"

namespace titan {

at::Tensor count_per_expert(const at::Tensor& selected, int64_t num_experts) {
  const at::Tensor ids = selected.reshape({-1}).to(at::kLong);
  return at::zeros({num_experts}, ids.options()).scatter_add_(0, ids, at::ones_like(ids));
}

TokenDispatcher::~TokenDispatcher() = default;

DispatchedTokens TokenDispatcher::dispatch(const at::Tensor& x, const at::Tensor& selected, int64_t num_experts,
                                           const at::Tensor& row_scale) {
  DispatchedTokens out = dispatch_on_device(x, selected, num_experts, row_scale);
  // The experts' loop needs the group sizes on the host: one read per MoE layer, as TorchTitan's loop.
  const at::Tensor counts = out.counts.cpu();
  out.tokens_per_expert.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts);
  return out;
}

DispatchedTokens TokenDispatcher::dispatch_on_device(const at::Tensor& x, const at::Tensor& selected,
                                                     int64_t num_experts, const at::Tensor& row_scale) {
  DispatchedTokens out = sort_by_expert(x, selected, row_scale);
  out.counts = count_per_expert(selected, num_experts);
  return out;
}

DispatchedTokens TokenDispatcher::sort_by_expert(const at::Tensor& x, const at::Tensor& selected,
                                                 const at::Tensor& row_scale) {
  const int64_t top_k = selected.size(1);
  at::Tensor flat = selected.reshape({-1});
  DispatchedTokens out;
  out.order = at::argsort(flat, /*stable=*/true);
  at::Tensor rows = x.index_select(0, at::div(out.order, top_k, "floor"));
  if (row_scale.defined()) {
    rows = (rows.to(at::kFloat) * row_scale.index_select(0, out.order).unsqueeze(1)).to(x.scalar_type());
  }
  out.tokens = rows;
  return out;
}

at::Tensor TokenDispatcher::combine(const at::Tensor& expert_output, const DispatchedTokens& dispatched,
                                    int64_t tokens, int64_t top_k) {
  at::Tensor unsorted = at::zeros({tokens * top_k, expert_output.size(1)}, expert_output.options())
                            .index_copy(0, dispatched.order, expert_output);
  return unsorted.view({tokens, top_k, expert_output.size(1)});
}

MoE::MoE(int64_t dim, const MoEOptions& options, const at::TensorOptions& tensor_options,
         std::shared_ptr<RoutedExperts> experts)
    : options_(options) {
  auto [key, problem] = find_moe_problem(options, dim);
  if (!key.empty()) throw Error("moe: " + key + ": " + problem);
  register_module("router", std::make_shared<Router>(dim, options, tensor_options));
  if (!experts) {
    experts = std::make_shared<GroupedExperts>(options.num_experts, dim, options.hidden_dim, options, tensor_options);
  }
  register_module("experts", std::move(experts));
  register_module("dispatcher", std::make_shared<TokenDispatcher>());
  if (options.num_shared_experts > 0) {
    register_module("shared_experts",
                    std::make_shared<FeedForward>(dim, options.hidden_dim * options.num_shared_experts, tensor_options));
  }
}

namespace {

template <typename T>
std::shared_ptr<T> part(const torch::nn::Module& moe, const std::string& name) {
  auto found = std::dynamic_pointer_cast<T>(find_module(moe, name));
  if (!found) throw Error("moe: '" + name + "' is missing or not of the type the MoE layer calls");
  return found;
}

}  // namespace

at::Tensor MoE::forward(const at::Tensor& input) { return run(input, at::Tensor()).view(input.sizes()); }

at::Tensor MoE::forward_rows(const at::Tensor& input, const at::Tensor& rows) {
  if (!rows.defined() || rows.dim() != 1 || rows.scalar_type() != at::kLong) {
    throw Error("moe: forward_rows takes a 1-D int64 tensor of token rows");
  }
  return run(input, rows);
}

at::Tensor MoE::run(const at::Tensor& input, const at::Tensor& rows) {
  const int64_t dim = input.size(-1);
  at::Tensor x = input.reshape({-1, dim});
  const int64_t top_k = options_.top_k;
  Routing routing = part<Router>(*this, "router")->forward(x);
  if (rows.defined()) {
    x = x.index_select(0, rows);
    routing.selected = routing.selected.index_select(0, rows);
    routing.top_scores = routing.top_scores.index_select(0, rows);
  }
  const int64_t tokens = x.size(0);
  auto dispatcher = part<TokenDispatcher>(*this, "dispatcher");
  auto experts = part<RoutedExperts>(*this, "experts");
  at::Tensor scale = options_.score_before_experts ? routing.top_scores.reshape({-1}) : at::Tensor();
  // Core's own dispatcher can leave the counts on the device for experts
  // that take them there: then nothing is read on the host. A replacing
  // dispatcher (expert parallelism) reads them for its all-to-all anyway.
  const TokenDispatcher& chosen = *dispatcher;
  const bool on_device = typeid(chosen) == typeid(TokenDispatcher) && experts->runs_on_device_counts(x);
  DispatchedTokens dispatched = on_device ? dispatcher->dispatch_on_device(x, routing.selected, options_.num_experts, scale)
                                          : dispatcher->dispatch(x, routing.selected, options_.num_experts, scale);
  at::Tensor expert_rows = on_device ? experts->forward_on_device_counts(dispatched.tokens, dispatched.counts)
                                     : experts->forward(dispatched.tokens, dispatched.tokens_per_expert);
  at::Tensor per_slot = dispatcher->combine(expert_rows, dispatched, tokens, top_k);  // [N, K, D]
  at::Tensor routed;
  if (options_.score_before_experts) {
    routed = per_slot.sum(1);
  } else {
    // Gate values weigh the experts' outputs in fp32, as TorchTitan's bmm.
    routed = at::bmm(routing.top_scores.view({tokens, 1, top_k}), per_slot.to(at::kFloat)).squeeze(1).to(x.scalar_type());
  }
  if (auto shared = find_child_layer(*this, "shared_experts")) routed = shared->forward(x) + routed;
  return routed;
}

std::vector<std::pair<std::string, std::shared_ptr<MoE>>> find_moe_layers(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<MoE>>> found;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    std::shared_ptr<torch::nn::Module> module = item.value();
    while (auto wrapper = std::dynamic_pointer_cast<LayerWrapper>(module)) module = wrapper->inner_ptr();
    if (auto moe = std::dynamic_pointer_cast<MoE>(module)) found.emplace_back(item.key(), moe);
  }
  return found;
}

}  // namespace titan
