// AcParallelizer: wraps each block's forward (inside the data-parallel
// wrappers, TorchTitan's order) to checkpoint it per the chosen mode: every
// block (full), every N-th block (selective N), or the blocks a plan built
// on the first step picks to fit a memory budget (memory_budget).
#pragma once
#include "ac_options.h"
#include "titan/parallelizer.hpp"

namespace titan::activation_checkpoint {

class AcParallelizer : public Parallelizer {
 public:
  explicit AcParallelizer(AcOptions options) : options_(std::move(options)) {}
  ApplyOrder apply_order() const override { return ApplyOrder::activation_checkpoint; }
  bool allows_split_backward() const override { return false; }  // recomputes when backward reaches a block
  void parallelize(CausalLM& model, const ParallelizeContext& context) override;

 private:
  AcOptions options_;
};

}  // namespace titan::activation_checkpoint
