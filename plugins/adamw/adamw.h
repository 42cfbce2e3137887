// AdamW with decoupled weight decay, step for step as torch.optim.AdamW
// (amsgrad off, maximize off): the update rule and its per-parameter state.
#pragma once
#include <map>
#include <string>
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
    // fused: the kernel's copy of `step` (0-dim float32 on the parameter's
    // device), advanced on the device; `device_step_holds` is the count it
    // holds, so a step loaded from a checkpoint is copied over once.
    at::Tensor device_step;
    double device_step_holds = -1;
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

  AdamWOptions options_;
  std::vector<ParamState> states_;
};

}  // namespace titan::adamw
