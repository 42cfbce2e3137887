// Ulysses attention (DeepSpeed's): an all-to-all trades each rank's
// sequence piece of all heads for the whole sequence of heads / cp, plain
// causal attention runs on that, and the inverse all-to-all trades back.
#pragma once
#include <memory>

#include "ring_attention.h"

namespace titan::context_parallel {

class UlyssesAttention : public AttentionCore {
 public:
  explicit UlyssesAttention(std::shared_ptr<const RingSetup> setup);
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& documents) override;

 private:
  std::shared_ptr<const RingSetup> setup_;
};

}  // namespace titan::context_parallel
