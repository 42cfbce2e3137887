// CpParallelizer: splits the sequence over the `cp` mesh dim. The model's
// code is untouched: every titan::AttentionCore is swapped for ring or
// Ulysses attention, a forward wrapper hands the model this rank's piece of
// the tokens, the model is told those tokens' global positions (rotary
// rows), and the loss reads the matching piece of the labels. Gradients are
// averaged over cp by the data-parallel plugin (FSDP over dp_shard x cp).
#pragma once
#include "cp_options.h"
#include "titan/parallelizer.hpp"

namespace titan::context_parallel {

class CpParallelizer : public Parallelizer {
 public:
  explicit CpParallelizer(CpOptions options) : options_(std::move(options)) {}
  ApplyOrder apply_order() const override { return ApplyOrder::context_parallel; }
  std::vector<MeshDimRequest> mesh_dims() const override { return {{"cp", options_.degree}}; }
  void validate(const ValidateContext& context) const override;
  void parallelize(CausalLM& model, const ParallelizeContext& context) override;

 private:
  CpOptions options_;
};

}  // namespace titan::context_parallel
