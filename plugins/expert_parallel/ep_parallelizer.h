// ExpertParallelizer: each MoE layer's routed experts split over the ep
// mesh dim (a split of dp_shard_cp into efsdp x ep, TorchTitan's sparse
// mesh), tokens sent to them by all-to-all (ep_dispatcher.h).
#pragma once
#include "titan/parallelizer.hpp"

namespace titan::expert_parallel {

struct EpOptions {
  int64_t degree = 1;  // expert_parallel_degree; 1: experts stay whole
};

class ExpertParallelizer : public Parallelizer {
 public:
  explicit ExpertParallelizer(EpOptions options) : options_(options) {}
  // With tensor parallelism, as TorchTitan's apply_moe_ep_tp: before CP, AC and FSDP.
  ApplyOrder apply_order() const override { return ApplyOrder::tensor_parallel; }
  std::vector<MeshSplitRequest> mesh_splits() const override;
  void validate(const ValidateContext& context) const override;
  void parallelize(CausalLM& model, const ParallelizeContext& context) override;

 private:
  EpOptions options_;
};

}  // namespace titan::expert_parallel
