// The rotary rotations as one autograd node (rotary_function.hpp): the
// composition took about ten nodes per call, each a round of the autograd
// engine's host work in backward.
#include "rotary_function.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

namespace titan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Which dims rotate together: (2i, 2i + 1) or (i, i + head_dim / 2).
enum class Layout : int64_t { pairs, halves };

// x rotated in fp32 by the angle of (c, s), each (first, second) to
// (first * c - second * s, second * c + first * s), back in `dtype`.
at::Tensor rotated(const at::Tensor& x, const at::Tensor& c, const at::Tensor& s, Layout layout,
                   at::ScalarType dtype) {
  const at::Tensor xf = x.to(at::kFloat);
  if (layout == Layout::halves) {
    const int64_t half = x.size(-1) / 2;
    const at::Tensor first = xf.narrow(-1, 0, half), second = xf.narrow(-1, half, half);
    return at::cat({first * c - second * s, second * c + first * s}, -1).to(dtype);
  }
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() /= 2;
  shape.push_back(2);
  const at::Tensor pairs = xf.reshape(shape);
  const at::Tensor first = pairs.select(-1, 0), second = pairs.select(-1, 1);
  return at::stack({first * c - second * s, first * s + second * c}, -1).flatten(-2).to(dtype);
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t layout) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["layout"] = layout;
    return rotated(x, cos, sin, static_cast<Layout>(layout), x.scalar_type());
  }

  // The rotation by minus the angle: first' = g0 * c + g1 * s, second' =
  // g1 * c - g0 * s, the two terms autograd adds for each (in either order:
  // a sum of two is the same bits), in x's dtype: the output's, which the
  // engine gives its gradient.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &c = saved[0], &s = saved[1];
    const auto layout = static_cast<Layout>(ctx->saved_data["layout"].toInt());
    return {rotated(grads[0], c, -s, layout, grads[0].scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rotate_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin, static_cast<int64_t>(Layout::pairs));
}

at::Tensor rotate_halves(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin, static_cast<int64_t>(Layout::halves));
}

}  // namespace titan
