// AdamW with decoupled weight decay, step for step as torch.optim.AdamW
// (amsgrad off, maximize off): the update rule and its per-parameter state.
#pragma once
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "titan/optimizer.hpp"

namespace titan::adamw {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // foreach: ATen _foreach_* ops per (device, dtype) group; for_loop: one
  // tensor at a time; fused: ATen's _fused_adamw_ kernel (one pass per group).
  enum class Implementation { foreach, for_loop, fused };
  Implementation implementation = Implementation::foreach;
};

class AdamW : public Optimizer {
 public:
  // Allocates every state tensor now (zeros), so that a checkpoint can be
  // loaded into state_tensors() in place before the first step.
  AdamW(const std::vector<NamedParameter>& params, const AdamWOptions& options);

  void step(double lr) override;
  void zero_grad() override;
  std::map<std::string, at::Tensor> state_tensors() override;

 private:
  struct ParamState {
    std::string name;
    at::Tensor param;
    at::Tensor exp_avg;     // first moment, like param
    at::Tensor exp_avg_sq;  // second moment, like param
    at::Tensor step;        // 0-dim float64 on CPU: steps taken by this parameter
  };
  // One parameter's update with its bias-corrected scalars already known.
  struct Update {
    ParamState* state;
    at::Tensor grad;
    double step_size;              // lr / (1 - beta1^t)
    double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  };
  void apply_for_loop(const std::vector<Update>& updates, double lr) const;
  void apply_foreach(const std::vector<Update>& updates, double lr) const;
  void apply_fused(const std::vector<Update>& updates, double lr);
  // fused: the step counts the kernel reads, 0-dim float32 on the group's
  // device, one tensor per count, shared by every parameter of the group at
  // that count (all of them, unless some skipped steps): one add a step
  // advances them, not one per parameter. From the counts `held` holds,
  // those that `counts` needs, advanced or made.
  static std::map<double, at::Tensor> step_tensors(const std::map<double, at::Tensor>& held,
                                                   const std::set<double>& counts, const at::TensorOptions& options);

  AdamWOptions options_;
  std::vector<ParamState> states_;
  std::map<std::tuple<int, int, int>, std::map<double, at::Tensor>> device_steps_;  // by (device type, index, dtype)
};

}  // namespace titan::adamw
