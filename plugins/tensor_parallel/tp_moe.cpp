// MoE layers under tensor parallelism (tp_moe.h has the two ways).
#include "tp_moe.h"

#include <ATen/ATen.h>

#include "titan/autograd_collectives.hpp"
#include "titan/comm.hpp"
#include "titan/error.hpp"
#include "titan/model.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"
#include "tp_weights.h"

namespace titan::tensor_parallel {

TpMoE::TpMoE(std::shared_ptr<Layer> wrapped, std::shared_ptr<MoE> moe, TpContext tp, std::string path,
             bool split_tokens)
    : TpLayer(std::move(wrapped), tp, std::move(path)), moe_(std::move(moe)), split_tokens_(split_tokens) {}

at::Tensor TpMoE::forward(const at::Tensor& input) {
  if (input.dim() != 3) {
    throw Error("tensor_parallel: MoE layer " + path_ + " expects [batch, seq, dim] input, got " + c10::str(input.sizes()));
  }
  at::Tensor whole = input;
  if (tp_.async && tp_.sequence_parallel) {
    // Async TP leaves the norm's output on its sequence shard (colwise
    // layers gather it chunk by chunk); the router needs every token.
    CallSite site("tp all_gather " + path_);
    whole = all_gather_autograd(input, *tp_.comm, kSequenceDim);
  }
  if (!split_tokens_) {
    at::Tensor partial = inner().forward(whole);
    CallSite site(std::string(tp_.sequence_parallel ? "tp reduce_scatter " : "tp all_reduce ") + path_);
    return reduce_partial_output(partial, tp_);
  }
  const int64_t batch = whole.size(0), seq = whole.size(1), ranks = tp_.comm->size();
  if (seq % ranks != 0) {
    throw Error("tensor_parallel: MoE layer " + path_ + ": sequence length " + std::to_string(seq) +
                " is not divisible by tensor_parallel_degree " + std::to_string(ranks) +
                " (expert parallelism over the tp ranks splits each sequence over them); change training.seq_len");
  }
  // This rank's sequence shard of every sample, as rows of the flattened
  // [batch * seq] tokens.
  const int64_t shard = seq / ranks, begin = shard * tp_.comm->rank();
  const at::TensorOptions long_options = whole.options().dtype(at::kLong);
  at::Tensor rows = (at::arange(batch, long_options) * seq).unsqueeze(1) +
                    at::arange(begin, begin + shard, long_options).unsqueeze(0);
  at::Tensor mine = moe_->forward_rows(whole, rows.reshape({-1})).view({batch, shard, whole.size(2)});
  if (tp_.sequence_parallel) return mine;  // the residual stream's own shard
  // Backward keeps this rank's slice of the (replicated) gradient.
  CallSite site("tp all_gather " + path_);
  return all_gather_to_replicate(mine, *tp_.comm, kSequenceDim);
}

namespace {

// A handle to the parameter (named_parameters() returns its dict by value:
// a reference into it would dangle once the dict is gone).
at::Tensor parameter(torch::nn::Module& module, const std::string& name, const std::string& path) {
  const auto params = module.named_parameters(/*recurse=*/false);
  const at::Tensor* found = params.find(name);
  if (!found) throw Error("tensor_parallel: MoE layer part '" + path + "' has no parameter '" + name + "'");
  return *found;
}

std::shared_ptr<torch::nn::Module> part(CausalLM& model, const std::string& path) {
  auto found = find_module(model, path);
  if (!found) throw Error("tensor_parallel: the model has no module '" + path + "'");
  return found;
}

// Sets every trainable parameter of `module` (recursively) whole over tp,
// its gradient summed over tp.
void whole_with_summed_gradients(CausalLM& model, const std::string& path, Comm& tp) {
  auto module = part(model, path);
  for (const auto& item : module->named_modules(path, /*include_self=*/true)) {
    sum_gradients_over_tp(*item.value(), tp, item.key());
    for (const auto& param : item.value()->named_parameters(/*recurse=*/false)) {
      model.set_layout(item.key() + "." + param.key(), whole_over_tp(param.value()));
    }
  }
}

}  // namespace

int parallelize_moe_layers(CausalLM& model, TpContext tp, bool split_tokens) {
  Comm& comm = *tp.comm;
  int count = 0;
  for (const auto& [path, moe] : find_moe_layers(model)) {
    // The router scores every token on every rank; each rank's gate
    // gradient comes from its own share of the work.
    whole_with_summed_gradients(model, path + ".router.gate", comm);
    const bool shared = find_module(model, path + ".shared_experts") != nullptr;
    if (split_tokens) {
      if (shared) whole_with_summed_gradients(model, path + ".shared_experts", comm);
    } else {
      auto experts = std::dynamic_pointer_cast<RoutedExperts>(part(model, path + ".experts"));
      if (!experts) throw Error("tensor_parallel: " + path + ".experts is not a titan::RoutedExperts layer");
      for (const auto& [weight, dim] : experts->hidden_width_dims()) {
        const std::string name = path + ".experts." + weight;
        if (dim < 0) {
          throw Error("tensor_parallel: " + name + " is added after the experts' down projection, so splitting the "
                      "experts' width over tp would add it once per rank; hold the experts with expert parallelism "
                      "(expert_parallel with degree = tensor_parallel_degree: tp then splits their tokens)");
        }
        if (model.layout(name)) {
          throw Error("tensor_parallel: " + name + " is already distributed (" + model.layout(name)->describe() +
                      "); experts are split over tp only without expert parallelism");
        }
        model.set_layout(name, shard_weight(parameter(*experts, weight, name), dim, comm, name));
      }
      if (shared) {
        for (const auto& [linear, dim] : {std::pair<const char*, int64_t>{"w1", 0}, {"w3", 0}, {"w2", 1}}) {
          const std::string name = path + ".shared_experts." + linear + ".weight";
          auto layer = part(model, path + ".shared_experts." + linear);
          model.set_layout(name, shard_weight(parameter(*layer, "weight", name), dim, comm, name));
        }
      }
    }
    auto layer = std::dynamic_pointer_cast<Layer>(find_module(model, path));
    if (!layer) throw Error("tensor_parallel: MoE layer '" + path + "' is not a titan::Layer");
    swap_module(model, path, std::make_shared<TpMoE>(layer, moe, tp, path, split_tokens));
    ++count;
  }
  return count;
}

}  // namespace titan::tensor_parallel
