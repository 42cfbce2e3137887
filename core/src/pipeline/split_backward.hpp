// The zero-bubble schedules' split backward, as PyTorch's pipelining does it
// (stage_backward_input / stage_backward_weight): I computes the stage
// input's gradient and keeps, for each autograd node where a parameter's
// gradient path joins the activation-gradient path, the gradient that flowed
// into it; W runs autograd from those nodes to the parameters only, so no
// node of the activation-gradient path runs twice.
#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace titan {

// What I keeps for W: the joining nodes (with the parameter-side nodes below
// them and their saved tensors) and the gradients that flowed into them. The
// rest of the stage's graph is freed once the caller drops its output.
class WeightGradientPass {
 public:
  struct State;
  explicit WeightGradientPass(std::unique_ptr<State> state);
  ~WeightGradientPass();
  WeightGradientPass(const WeightGradientPass&) = delete;
  WeightGradientPass& operator=(const WeightGradientPass&) = delete;

  // W: accumulates the parameters' gradients into their .grad (their hooks
  // run as in a whole backward), then frees everything I kept. Once only.
  void run();
  // The nodes W starts from, and the bytes of the gradients I kept for them
  // (distinct storages; 0 after run()).
  size_t start_nodes() const;
  int64_t kept_gradient_bytes() const;

 private:
  std::unique_ptr<State> state_;
};

struct SplitBackward {
  at::Tensor input_gradient;                   // d target / d input (undefined without an input)
  std::unique_ptr<WeightGradientPass> weight;  // what W needs
};

// I: the gradient of `target` (weighted by `grad_output`, undefined for a
// scalar loss) with respect to `input`, a leaf that requires grad, computing
// no parameter's gradient. Without an input (undefined: the first stage) the
// parameter the earliest forward op consumed (the embedding) ends the path
// instead, and I accumulates its gradient into its .grad, so that I and W
// still share the work as on the other stages. The graph under `target`
// stays as long as the returned pass needs it; `target` itself may be
// dropped at once.
SplitBackward backward_input(const at::Tensor& target, const at::Tensor& grad_output, const at::Tensor& input,
                             const std::vector<at::Tensor>& parameters);

}  // namespace titan
