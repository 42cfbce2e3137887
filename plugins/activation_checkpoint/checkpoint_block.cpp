// The checkpoint as one autograd function; what its backward needs (the
// body, the input, the RNG state, what the original forward produced) rides
// in a capsule in the autograd context and is released by the backward.
#include "checkpoint_block.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "checkpoint_rng.h"
#include "per_op_sac.h"
#include "titan/error.hpp"
#include "titan/profile_range.hpp"

namespace titan::activation_checkpoint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Recompute : torch::CustomClassHolder {
  BlockBody body;
  CheckpointSettings settings;
  at::Tensor input;      // detached; the only activation kept
  at::Tensor rng_state;  // the CPU generator's state at the original forward
  std::vector<int64_t> output_shape;
  c10::ScalarType output_dtype = c10::kFloat;
  at::Tensor output;     // the original output, for determinism_check: values
  std::unique_ptr<OpCache> ops;  // per-op mode: the outputs kept for replay
};

void check_determinism(const Recompute& call, const at::Tensor& recomputed) {
  const std::string& mode = call.settings.determinism_check;
  if (mode == "none") return;
  std::string problem;
  if (recomputed.sizes() != c10::IntArrayRef(call.output_shape)) {
    problem = "shape " + c10::str(recomputed.sizes()) + " instead of " + c10::str(c10::IntArrayRef(call.output_shape));
  } else if (recomputed.scalar_type() != call.output_dtype) {
    problem = std::string("dtype ") + c10::toString(recomputed.scalar_type()) + " instead of " +
              c10::toString(call.output_dtype);
  } else if (mode == "values" && !at::equal(recomputed.detach(), call.output)) {
    double worst = (recomputed.detach() - call.output).abs().max().item<double>();
    problem = "values differing by up to " + std::to_string(worst);
  }
  if (!problem.empty()) {
    throw Error("activation_checkpoint: the recomputed forward of " + call.settings.label + " gives " + problem +
                " (determinism_check: " + mode + "); the block is not deterministic" +
                (call.settings.preserve_rng_state ? "" : " (it may draw random numbers: set preserve_rng_state: true)"));
  }
}

struct Checkpoint : torch::autograd::Function<Checkpoint> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, c10::intrusive_ptr<Recompute> call) {
    if (call->settings.preserve_rng_state) call->rng_state = cpu_rng_state();
    if (call->settings.per_op) call->ops = std::make_unique<OpCache>();
    at::Tensor output;
    {
      OpCacheScope scope(call->ops.get());  // per-op mode: the kept ops record their outputs
      output = call->body(hidden);          // autograd is off here: nothing else is kept
    }
    call->input = hidden.detach();
    call->output_shape = output.sizes().vec();
    call->output_dtype = output.scalar_type();
    if (call->settings.determinism_check == "values") call->output = output.detach();
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto call = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["call"].toCapsule());
    ctx->saved_data.erase("call");
    at::Tensor input = call->input.detach().requires_grad_(true);
    call->input = at::Tensor();
    at::Tensor current_rng;
    if (call->settings.preserve_rng_state) {
      current_rng = cpu_rng_state();
      replay_forward_rng(call->rng_state);
    }
    at::Tensor output;
    if (call->ops) {  // the recompute meets the same ops in the same order
      call->ops->mode = OpCache::Mode::replay;
      call->ops->cursor = 0;
      call->ops->matmuls = 0;
    }
    {
      at::AutoGradMode enable(true);
      OpCacheScope scope(call->ops.get());
      ProfileRange range(kRecomputeRange);
      output = call->body(input);
    }
    if (call->ops && call->ops->cursor != call->ops->outputs.size()) {
      throw Error("activation_checkpoint (op): the recompute of " + call->settings.label + " replayed " +
                  std::to_string(call->ops->cursor) + " of the " + std::to_string(call->ops->outputs.size()) +
                  " outputs its forward kept; the block's ops ran in another order");
    }
    call->ops.reset();
    if (current_rng.defined()) set_cpu_rng_state(current_rng);
    check_determinism(*call, output);
    call->output = at::Tensor();
    // Parameters' gradients accumulate here, before this block's input
    // gradient leaves (FSDP reduce-scatters right after).
    torch::autograd::backward({output}, {grads[0]});
    return {input.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint_block(const at::Tensor& hidden, const BlockBody& body, const CheckpointSettings& settings) {
  if (!hidden.requires_grad()) {
    throw Error("activation_checkpoint: the input of " + settings.label +
                " needs no gradient, so its recomputing backward would never run and its parameters would get no "
                "gradient; leave this block out of checkpointing");
  }
  auto call = c10::make_intrusive<Recompute>();
  call->body = body;
  call->settings = settings;
  return Checkpoint::apply(hidden, std::move(call));
}

}  // namespace titan::activation_checkpoint
