// The dense SwiGLU feed-forward's forward (TorchTitan's FeedForward).
#include "titan/feed_forward.hpp"

#include <ATen/ATen.h>

#include "titan/error.hpp"
#include "titan/module_path.hpp"

namespace titan {

FeedForward::FeedForward(int64_t dim, int64_t hidden_dim, const at::TensorOptions& options) {
  register_module("w1", std::make_shared<Linear>(dim, hidden_dim, options));
  register_module("w2", std::make_shared<Linear>(hidden_dim, dim, options));
  register_module("w3", std::make_shared<Linear>(dim, hidden_dim, options));
  register_module("swiglu", std::make_shared<SwiGLU>());
}

at::Tensor FeedForward::forward(const at::Tensor& x) {
  auto swiglu = std::dynamic_pointer_cast<SwiGLU>(find_module(*this, "swiglu"));
  if (!swiglu) throw Error("feed_forward: 'swiglu' is missing or not a titan::SwiGLU");
  at::Tensor hidden = swiglu->forward(child_layer(*this, "w1")->forward(x), child_layer(*this, "w3")->forward(x));
  return child_layer(*this, "w2")->forward(hidden);
}

}  // namespace titan
