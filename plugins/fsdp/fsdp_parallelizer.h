// FsdpParallelizer: shards every parameter (under 2-D, its tensor-parallel piece) over dp_shard
// (so materialization allocates shards only), records the layouts, and
// wires the units into the model's forward, block and gradient hooks.
#pragma once
#include <string>

#include "titan/parallelizer.hpp"

namespace titan::fsdp {

struct FsdpOptions {
  int64_t dp_shard = -1;       // -1: the rest of the world
  int64_t dp_replicate = 1;    // > 1: HSDP
  std::string reshard_after_forward = "default";  // default | always | never
};

class FsdpParallelizer : public Parallelizer {
 public:
  explicit FsdpParallelizer(FsdpOptions options) : options_(std::move(options)) {}
  Stage stage() const override { return Stage::data_parallel; }
  std::vector<MeshDimRequest> mesh_dims() const override;
  void parallelize(CausalLM& model, const ParallelizeContext& context) override;

 private:
  FsdpOptions options_;
};

}  // namespace titan::fsdp
