// CausalLM's wrapper chains, layout table and placement-aware init, and
// ModelSpec defaults.
#include "titan/model.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/meta_tally.hpp"

namespace titan {

at::Tensor CausalLM::run_block(int64_t index, const at::Tensor& hidden, const BlockBody& body) const {
  return wrapped_body(index, wrappers_.size(), body)(hidden);
}

BlockBody CausalLM::wrapped_body(int64_t index, size_t depth, const BlockBody& body) const {
  // Wrapper k calls wrapper k-1 as its inner; wrapper 0 calls the body. Each
  // inner holds copies, not references, so a wrapper may keep it and call it
  // again in backward (activation checkpointing recomputes the block).
  if (depth == 0) return body;
  BlockBody inner = wrapped_body(index, depth - 1, body);
  return [this, depth, index, inner](const at::Tensor& x) { return wrappers_[depth - 1](index, x, inner); };
}

at::Tensor CausalLM::run(const at::Tensor& tokens, const at::Tensor& document_positions) {
  // Held for this call only: each microbatch (and pipeline stage) brings its own.
  struct Held {
    at::Tensor& slot;
    ~Held() { slot = at::Tensor(); }
  } held{document_positions_};
  document_positions_ = document_positions;
  std::function<at::Tensor(size_t, const at::Tensor&)> call = [&](size_t depth, const at::Tensor& t) {
    if (depth == 0) return forward(t);
    ForwardBody inner = [&, depth](const at::Tensor& x) { return call(depth - 1, x); };
    return forward_wrappers_[depth - 1](t, inner);
  };
  return call(forward_wrappers_.size(), tokens);
}

std::vector<const StepHook*> CausalLM::step_hooks() const {
  std::vector<const StepHook*> hooks;
  for (const StepHook& hook : step_hooks_) hooks.push_back(&hook);
  return hooks;
}

void CausalLM::finalize_gradients() {
  for (auto& finalizer : finalizers_) finalizer();
}

int64_t CausalLM::last_position(int64_t seq) const {
  if (seq == 0) return -1;
  if (!positions_) return seq - 1;
  const at::Tensor rows = positions(seq).contiguous();
  const int64_t* first = rows.data_ptr<int64_t>();
  return *std::max_element(first, first + seq);
}

at::Tensor CausalLM::positions(int64_t seq) const {
  if (!positions_) return at::arange(seq, at::kLong);
  at::Tensor given = positions_(seq);
  if (given.dim() != 1 || given.size(0) != seq || given.scalar_type() != at::kLong || !given.device().is_cpu()) {
    throw Error("the positions a plugin set for " + std::to_string(seq) + " tokens are " + c10::str(given.sizes()) +
                " " + c10::toString(given.scalar_type()) + " on " + given.device().str() +
                "; expected [" + std::to_string(seq) + "] Long on cpu");
  }
  return given;
}

LossFn CausalLM::training_loss() const {
  if (!objective_) return loss_;
  Objective objective = objective_;
  LossFn loss = loss_;
  return [objective, loss](const at::Tensor& output, const at::Tensor& labels) { return objective(output, labels, loss); };
}

const TensorLayout* CausalLM::layout(const std::string& name) const {
  auto found = layouts_.find(name);
  return found == layouts_.end() ? nullptr : &found->second;
}

void CausalLM::init_weights(uint64_t seed) {
  at::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    at::Tensor& param = item.value();
    if (param.is_meta()) {
      throw Error("init_weights() on meta parameter '" + item.key() + "': materialize the model on a device first");
    }
    const TensorLayout* piece = layout(item.key());
    at::Tensor values = at::empty(piece ? piece->global_shape : param.sizes().vec(), at::kFloat);
    init_parameter(item.key(), values, seed);
    if (piece) values = local_piece(values, *piece);
    if (values.sizes() != param.sizes()) {
      throw Error("init_weights: parameter '" + item.key() + "' is locally " + c10::str(param.sizes()) +
                  " but its layout gives " + c10::str(values.sizes()) + "; the plugin that sharded it set a wrong layout");
    }
    param.copy_(values);
  }
  init_buffers();
}

at::Tensor cross_entropy_loss(const at::Tensor& logits, const at::Tensor& labels) {
  return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
}

void materialize_module(torch::nn::Module& module, const c10::Device& device) {
  // A dry run counts its meta bytes from here on, as a real run's
  // allocator sees nothing of the model before this.
  if (internal::MetaTally* tally = internal::current_meta_tally()) tally->counting = true;
  at::NoGradGuard no_grad;
  for (auto& tensor : module.parameters()) {
    if (tensor.device().is_meta()) compat::materialize_in_place(tensor, device);
  }
  for (auto& tensor : module.buffers()) {
    if (tensor.device().is_meta()) compat::materialize_in_place(tensor, device);
  }
}

}  // namespace titan
