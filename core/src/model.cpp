// CausalLM's block-wrapper chain and ModelSpec defaults.
#include "titan/model.hpp"

namespace titan {

at::Tensor CausalLM::run_block(int64_t index, const at::Tensor& hidden, const BlockBody& body) const {
  // Wrapper k calls wrapper k-1 as its inner; wrapper 0 calls the body.
  std::function<at::Tensor(size_t, const at::Tensor&)> call = [&](size_t depth, const at::Tensor& h) {
    if (depth == 0) return body(h);
    BlockBody inner = [&, depth](const at::Tensor& x) { return call(depth - 1, x); };
    return wrappers_[depth - 1](index, h, inner);
  };
  return call(wrappers_.size(), hidden);
}

std::vector<int64_t> ModelSpec::pipeline_split_points(int64_t stages) const {
  auto model = build(c10::Device(c10::kMeta));
  int64_t blocks = model->num_blocks();
  std::vector<int64_t> points;
  for (int64_t stage = 1; stage < stages; ++stage) points.push_back(stage * blocks / stages);
  return points;
}

}  // namespace titan
