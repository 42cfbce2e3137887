// The bytes a tensor's elements take (0 for an undefined tensor): what the
// step, the dry run and the simulated world count as memory held.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace titan {

inline int64_t tensor_bytes(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.numel() * tensor.element_size()) : int64_t{0};
}

}  // namespace titan
