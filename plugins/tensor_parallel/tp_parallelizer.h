// TpParallelizer: swaps each layer the model's TP plan names for its
// tensor-parallel form over the `tp` mesh dim, shards its weight on the meta
// model (so materialization allocates the local piece only), records the
// layouts, and leaves the logits vocab-sharded with a loss that gathers them
// (loss_parallel, when listed, replaces that loss).
#pragma once
#include "titan/parallelizer.hpp"
#include "tp_options.h"

namespace titan::tensor_parallel {

class TpParallelizer : public Parallelizer {
 public:
  explicit TpParallelizer(TpOptions options) : options_(options) {}
  ApplyOrder apply_order() const override { return ApplyOrder::tensor_parallel; }
  std::vector<MeshDimRequest> mesh_dims() const override { return {{"tp", options_.degree}}; }
  void validate(const ValidateContext& context) const override;
  void parallelize(CausalLM& model, const ParallelizeContext& context) override;

 private:
  TpOptions options_;
};

}  // namespace titan::tensor_parallel
