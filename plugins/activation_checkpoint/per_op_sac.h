// Per-op selective activation checkpointing (TorchTitan's "op" policy) over
// the layer seam: a checkpointed block's forward keeps the outputs of its
// attention core and of every other matmul (plain Linear layers, counted in
// call order: the 1st, 3rd, ... are kept, as TorchTitan counts mm calls);
// its recompute in backward replays those outputs instead of computing
// them, through autograd functions whose backward is the op's own, and
// recomputes everything else (norms, RoPE, activations, the other matmuls).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "titan/layers.hpp"

namespace titan::activation_checkpoint {

// The saved outputs of one block's forward, in call order.
struct OpCache {
  enum class Mode { record, replay };
  Mode mode = Mode::record;
  std::vector<at::Tensor> outputs;  // kept op outputs (attention: output then weights)
  size_t cursor = 0;                // next output to replay
  int64_t matmuls = 0;              // matmuls seen in this pass
  int64_t saved_bytes() const;
};

// The cache of the block running under per-op checkpointing on this
// thread (null elsewhere): set for the forward and for the recompute.
class OpCacheScope {
 public:
  explicit OpCacheScope(OpCache* cache);
  ~OpCacheScope();
  static OpCache* current();

 private:
  OpCache* previous_;
};

// Swapped in for a block's plain Linear layers; `forced` ones (per_op_sac_
// force_recompute_mm_shapes_by_fqns) are always recomputed.
class SacLinear : public LayerWrapper {
 public:
  SacLinear(std::shared_ptr<Layer> inner, bool forced) : LayerWrapper(std::move(inner)), forced_(forced) {}
  at::Tensor forward(const at::Tensor& input) override;

 private:
  bool forced_;
};

// Swapped in for a block's attention core.
class SacAttention : public AttentionCore {
 public:
  explicit SacAttention(std::shared_ptr<AttentionCore> inner) : inner_(std::move(inner)) {}
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& documents) override;

 private:
  std::shared_ptr<AttentionCore> inner_;
};

}  // namespace titan::activation_checkpoint
