// A MicrobatchRunner runs one training step's forward and backward passes
// over the step's microbatches, accumulating their gradients: plain gradient
// accumulation by default, or a `microbatch_runner` plugin's. Such a plugin
// never drives pipeline stages: with a pipeline, core's pipeline executor
// runs the step and a microbatch_runner plugin is refused.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "titan/model.hpp"

namespace titan {

struct Microbatch {
  at::Tensor inputs;  // [batch, seq] int64
  at::Tensor labels;  // [batch, seq] int64
  // Each input token's position within its document ([batch, seq] int64);
  // undefined unless model.attn_mask_type is block_causal (CausalLM::run).
  at::Tensor document_positions;
  // Each row's share of the step's loss, known on the host: its labels that
  // carry loss x the data-parallel degree / those of the whole global batch
  // (every microbatch of every data-parallel rank). A runner weights a
  // microbatch's mean loss (the LossFn's) by the sum over its rows, so the
  // step's loss is the sum over the global batch's real labels divided by
  // their count, however they are split. Empty: 1 / microbatches each.
  std::vector<double> row_weights;
};

// A microbatch's (or rows [begin, end)'s) weight: the sum of its
// row_weights, or `fallback` without them.
double loss_weight(const Microbatch& microbatch, double fallback, int64_t begin = 0, int64_t end = -1);
// A microbatch's mean loss x its weight. A microbatch with no label that
// carries loss (weight 0) has a NaN mean (0 / 0): it contributes 0.
at::Tensor weighted_loss(const at::Tensor& mean, double weight);

class MicrobatchRunner {
 public:
  virtual ~MicrobatchRunner() = default;
  // Accumulates gradients of the weighted sum of the microbatches' losses
  // (loss_weight(): the step's loss over its real labels) into the params;
  // returns that loss as a 0-dim tensor (detached). Gradient sync
  // (CausalLM::set_gradient_sync) should be on for the last microbatch only,
  // so data parallelism reduces once per step, not once per microbatch.
  // (Named for what it does: "step" is the trainer's whole step, of which
  // this is the forward and backward part.)
  virtual at::Tensor forward_backward(CausalLM& model, const std::vector<Microbatch>& microbatches,
                                      const LossFn& loss) = 0;
};

// The trainer's default: forward and backward over each microbatch in turn,
// gradients accumulated, the loss averaged over the microbatches. With
// `autocast_to`, forward and loss run under autocast to that dtype on the
// device type (training.mixed_precision_param with no parallelizer, as
// TorchTitan does).
struct Autocast {
  c10::DeviceType device_type;
  c10::ScalarType dtype;
};
std::unique_ptr<MicrobatchRunner> gradient_accumulation(std::optional<Autocast> autocast_to = std::nullopt);

}  // namespace titan
