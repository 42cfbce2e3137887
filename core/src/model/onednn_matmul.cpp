// matmul_nt through oneDNN's linear op (the one TorchInductor's CPU backend
// calls), looked up once in the dispatcher; at::mm where it is missing.
#include "titan/onednn_matmul.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace titan {

namespace {

// mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars, str? algorithm) -> Tensor
using LinearPointwise = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                   c10::string_view, c10::List<std::optional<at::Scalar>>,
                                   std::optional<c10::string_view>);

const c10::TypedOperatorHandle<LinearPointwise>* onednn_linear() {
  static const c10::TypedOperatorHandle<LinearPointwise>* handle = []() -> c10::TypedOperatorHandle<LinearPointwise>* {
    if (!at::hasMKLDNN()) return nullptr;
    auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
    if (!op) return nullptr;
    // typed() checks the C++ signature against the registered schema.
    return new c10::TypedOperatorHandle<LinearPointwise>(op->typed<LinearPointwise>());
  }();
  return handle;
}

}  // namespace

bool onednn_matmul_preferred() {
  static const bool preferred = __builtin_cpu_supports("avx512f") && onednn_linear() != nullptr;
  return preferred;
}

at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b) {
  if (!onednn_matmul_preferred() || a.size(0) * a.size(1) * b.size(0) < kOneDnnMinMultiplies) return at::mm(a, b.t());
  return onednn_linear()->call(a, b, std::nullopt, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace titan
