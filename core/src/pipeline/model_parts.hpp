// The pipeline stages one pp rank holds, seen as one CausalLM wherever the
// trainer spans them: global parameter names (optimizer, checkpoints,
// gradient clipping, debug.save_final_model), layouts, init and gradient
// finalizers. The executor runs the parts themselves; this one's forward
// is never called.
#pragma once
#include <memory>
#include <vector>

#include "titan/model.hpp"

namespace titan {

class ModelParts : public CausalLM {
 public:
  // After every parallelizer ran on the parts (a plugin may swap a part's
  // top-level module), before materialization. A parameter without a layout
  // gets a whole one, so checkpoints and norms see that it lives on this pp
  // rank only (TensorLayout never counts pp as replication).
  explicit ModelParts(std::vector<std::shared_ptr<CausalLM>> parts);

  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t num_blocks() const override;
  std::shared_ptr<torch::nn::Module> block(int64_t index) override;
  void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const override;
  void init_buffers() override;
  // The parts too (eval mode for validation): they are modules of their own.
  void train(bool on = true) override;
  // Every part's hooks, in stage order.
  std::vector<const StepHook*> step_hooks() const override;

  const std::vector<std::shared_ptr<CausalLM>>& parts() const { return parts_; }

 private:
  std::vector<std::shared_ptr<CausalLM>> parts_;
};

}  // namespace titan
