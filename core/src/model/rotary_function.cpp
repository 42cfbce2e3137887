// The interleaved-pair rotation as one autograd node (rotary_function.hpp):
// the composition took about ten nodes per call, each a round of the
// autograd engine's host work in backward.
#include "rotary_function.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

namespace titan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x's last dim as pairs: [..., half, 2] in fp32.
at::Tensor as_pairs(const at::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() /= 2;
  shape.push_back(2);
  return x.to(at::kFloat).reshape(shape);
}

// (first, second) of each pair rotated by the angle of (c, s): first * c -
// second * s, first * s + second * c, interleaved back into [..., head_dim].
at::Tensor rotated(const at::Tensor& pairs, const at::Tensor& c, const at::Tensor& s, at::ScalarType dtype) {
  const at::Tensor first = pairs.select(-1, 0), second = pairs.select(-1, 1);
  return at::stack({first * c - second * s, first * s + second * c}, -1).flatten(-2).to(dtype);
}

struct RotatePairsFunction : torch::autograd::Function<RotatePairsFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return rotated(as_pairs(x), cos, sin, x.scalar_type());
  }

  // The rotation by minus the angle: first' = g0 * c + g1 * s, second' =
  // g1 * c - g0 * s, the two terms autograd adds for each (in either order:
  // a sum of two is the same bits).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &c = saved[0], &s = saved[1];
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {rotated(as_pairs(grads[0]), c, -s, dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rotate_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotatePairsFunction::apply(x, cos, sin);
}

}  // namespace titan
