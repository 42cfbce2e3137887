// A linear layer whose three products (forward, input and weight
// gradients) run through matmul_nt (titan/onednn_matmul.hpp): oneDNN where it
// beats ATen's BLAS, in one autograd node. Falls back to the wrapped
// titan::Linear for meta or non-CPU tensors and dtypes other than fp32.
// Plugin-private header.
#pragma once
#include <memory>

#include "titan/layers.hpp"

namespace titan::fused {

class CpuLinear : public LayerWrapper {
 public:
  explicit CpuLinear(std::shared_ptr<Linear> inner) : LayerWrapper(inner), linear_(std::move(inner)) {}
  at::Tensor forward(const at::Tensor& input) override;

 private:
  std::shared_ptr<Linear> linear_;
};

}  // namespace titan::fused
