// Tensor helpers shared by the kernel tests. Include after <torch/torch.h>.
#pragma once
#include <ATen/ATen.h>

namespace titan::test {

// A fresh autograd leaf holding `t`'s values.
inline at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }

// The name a test case prints for the two dtypes the kernels take.
inline const char* dtype_name(at::ScalarType dtype) { return dtype == at::kFloat ? "fp32" : "bf16"; }

}  // namespace titan::test
