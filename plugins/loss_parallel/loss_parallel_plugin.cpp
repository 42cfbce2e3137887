// The `loss_parallel` plugin: after tensor parallelism has left the logits
// split over the vocabulary, the model's loss becomes the vocab-parallel
// cross-entropy, so the [tokens, vocab] logits are never gathered.
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/parallelizer.hpp"
#include "titan/plugin.hpp"
#include "vocab_parallel_cross_entropy.h"

namespace {

class LossParallel : public titan::Parallelizer {
 public:
  titan::ApplyOrder apply_order() const override { return titan::ApplyOrder::loss_parallel; }
  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    const std::string& dim = model.logits_vocab_sharded_over();
    if (dim.empty() || !context.mesh || context.mesh->size(dim) == 1) {
      // As TorchTitan: loss parallel applies only where TP split the head.
      spdlog::warn("loss_parallel: the logits are not split over the vocabulary (no tensor_parallel with "
                   "tensor_parallel_degree > 1); the ordinary loss runs");
      return;
    }
    titan::Comm* group = &context.mesh->group(dim);
    model.set_loss([group](const at::Tensor& logits, const at::Tensor& labels) {
      return titan::loss_parallel::vocab_parallel_cross_entropy(logits, labels, *group);
    });
    spdlog::info("loss_parallel: cross-entropy on logits split over {}={}", dim, group->size());
  }
};

// titan plan: the loss on the vocab-sharded logits wherever TP splits the head.
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  return layout.tp > 1 ? "  - name: " + name + "\n" : "";
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(parallelizer, LossParallel, "1.0",
                        "cross-entropy on vocab-sharded logits (with tensor_parallel), never gathering them",
                        plan_entry)
