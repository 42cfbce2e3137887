// Forward passes of the tensor-parallel layers (the rowwise linear's, with
// the reduction of partial outputs, in tp_reduction.cpp); every collective
// goes through the comm layer under a call site naming the layer.
#include "tp_layers.h"

#include <ATen/ATen.h>

#include "async_tp.h"
#include "titan/autograd_collectives.hpp"
#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan::tensor_parallel {

const at::Tensor* linear_weight(const Layer& layer) {
  auto* linear = dynamic_cast<const Linear*>(&layer);
  return linear && !linear->bias.defined() ? &linear->weight : nullptr;
}

const at::Tensor* linear_bias(const Layer& layer) {
  const Layer* inner = &layer;
  while (auto* wrapper = dynamic_cast<const LayerWrapper*>(inner)) inner = &wrapper->inner();
  auto* linear = dynamic_cast<const Linear*>(inner);
  return linear && linear->bias.defined() ? &linear->bias : nullptr;
}

at::Tensor ColwiseLinear::forward(const at::Tensor& input) {
  if (!(tp_.async && tp_.sequence_parallel)) return inner().forward(input);  // the norm before gathered it
  CallSite site("tp all_gather+matmul " + path_);
  if (const at::Tensor* weight = linear_weight(inner())) {
    return all_gather_matmul(input, *weight, *tp_.comm, tp_.async_chunks);
  }
  // A layer that is not a plain Linear (e.g. swapped by another plugin):
  // gather first, then its own forward.
  return inner().forward(all_gather_autograd(input, *tp_.comm, kSequenceDim));
}

at::Tensor VocabParallelEmbedding::forward(const at::Tensor& tokens) {
  const int64_t local_rows = named_parameters(/*recurse=*/false)["weight"].size(0);
  // Tokens of other ranks' vocabulary look up row 0 and are zeroed, so the
  // sum over ranks holds each token's row exactly once.
  at::Tensor outside = (tokens < vocab_begin_) | (tokens >= vocab_begin_ + local_rows);
  at::Tensor local_ids = (tokens - vocab_begin_).masked_fill(outside, 0);
  at::Tensor rows = inner().forward(local_ids).masked_fill(outside.unsqueeze(-1), 0);
  CallSite site(std::string(tp_.sequence_parallel ? "tp reduce_scatter " : "tp all_reduce ") + path_);
  return reduce_partial_output(rows, tp_);
}

void sum_gradient_over_tp(at::Tensor& parameter, Comm& tp, const std::string& name) {
  if (!parameter.requires_grad()) return;
  Comm* comm = &tp;
  std::string site_text = "tp all_reduce " + name + " grad";
  parameter.register_hook([comm, site_text](const at::Tensor& grad) {
    CallSite site(site_text);
    at::Tensor sum = grad.clone();
    comm->all_reduce(sum, ReduceOp::sum);
    return sum;
  });
}

void sum_gradients_over_tp(torch::nn::Module& module, Comm& tp, const std::string& path) {
  for (auto& item : module.named_parameters(/*recurse=*/false)) sum_gradient_over_tp(item.value(), tp, path + "." + item.key());
}

RowwiseLinear::RowwiseLinear(std::shared_ptr<Layer> inner, TpContext tp, std::string path)
    : TpLayer(std::move(inner), tp, std::move(path)) {
  const at::Tensor* bias = linear_bias(this->inner());
  if (!bias) return;
  biased_ = dynamic_cast<const Linear*>(&this->inner());
  if (!biased_) {
    throw Error("tensor_parallel: the rowwise layer " + path_ + " has a bias inside another plugin's wrapper, "
                "whose forward would add it before the reduction, once per rank; keep " + path_ +
                " out of that plugin (e.g. float8's filter_fqns)");
  }
  at::Tensor handle = *bias;
  if (tp_.sequence_parallel) sum_gradient_over_tp(handle, *tp_.comm, path_ + ".bias");
}

ParallelNorm::ParallelNorm(std::shared_ptr<Layer> inner, TpContext tp, std::string path)
    : TpLayer(std::move(inner), tp, std::move(path)) {
  // On a sequence shard each rank's weight gradient covers its own rows
  // only: the sum over ranks is the gradient of the whole sequence.
  if (tp_.sequence_parallel) sum_gradients_over_tp(*this, *tp_.comm, path_);
}

NoParallelLayer::NoParallelLayer(std::shared_ptr<Layer> inner, TpContext tp, std::string path)
    : TpLayer(std::move(inner), tp, std::move(path)) {
  sum_gradients_over_tp(*this, *tp_.comm, path_);
}

at::Tensor ParallelNorm::forward(const at::Tensor& input) {
  at::Tensor normed = inner().forward(input);
  if (!tp_.sequence_parallel) {
    // Whole input on every rank; the colwise layers it feeds each return a
    // partial input gradient, summed here.
    CallSite site("tp all_reduce " + path_ + " (backward)");
    return replicate_to_parallel(normed, *tp_.comm);
  }
  if (tp_.async) return normed;  // the colwise layers gather it, chunk by chunk
  CallSite site("tp all_gather " + path_);
  return all_gather_autograd(normed, *tp_.comm, kSequenceDim);
}

}  // namespace titan::tensor_parallel
