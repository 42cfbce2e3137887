// FsdpParallelizer: shards every parameter (under 2-D, its tensor-parallel piece) over dp_shard
// (so materialization allocates shards only), records the layouts, and
// wires the units into the model's forward, block and gradient hooks.
#pragma once
#include <string>

#include "titan/parallelizer.hpp"

namespace titan {
class ConfigNode;
}

namespace titan::fsdp {

// When a block's gathered parameters are freed after its forward;
// pipeline_aware is TorchTitan's "default": always, but never under pp > 1.
enum class ReshardAfterForward { pipeline_aware, always, never };

struct FsdpOptions {
  int64_t dp_shard = -1;       // -1: the rest of the world
  int64_t dp_replicate = 1;    // > 1: HSDP
  ReshardAfterForward reshard_after_forward = ReshardAfterForward::pipeline_aware;
  // Start the next block's all-gather while this block computes (forward:
  // the block after, backward: the block before); false gathers each block
  // only when it runs, so no communication overlaps compute.
  bool prefetch = true;
};

// The `fsdp:` options, read and checked (fsdp_options.cpp).
FsdpOptions read_fsdp_options(const ConfigNode& node);

class FsdpParallelizer : public Parallelizer {
 public:
  explicit FsdpParallelizer(FsdpOptions options) : options_(std::move(options)) {}
  ApplyOrder apply_order() const override { return ApplyOrder::data_parallel; }
  bool allows_split_backward() const override { return false; }  // reduce-scatters in the block's backward
  std::vector<MeshDimRequest> mesh_dims() const override;
  void parallelize(CausalLM& model, const ParallelizeContext& context) override;

 private:
  FsdpOptions options_;
};

}  // namespace titan::fsdp
