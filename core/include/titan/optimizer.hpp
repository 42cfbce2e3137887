// OptimizerFactory builds an optimizer over the local (maybe sharded)
// parameters; LrSchedule gives the learning-rate factor for a step.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace titan {

class DeviceMesh;
struct TensorLayout;

struct NamedParameter {
  std::string name;
  at::Tensor tensor;  // a leaf with requires_grad; .grad() read at step()
  // Where it lives, for a rule that needs the whole tensor (Muon): this
  // rank's piece of the global tensor over the mesh. Null: whole, here.
  const TensorLayout* layout = nullptr;
  const DeviceMesh* mesh = nullptr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(double lr) = 0;
  virtual void zero_grad() = 0;
  // "<param name>.<state name>" -> tensor (same shape/placement as param)
  virtual std::map<std::string, at::Tensor> state_tensors() = 0;
};

class OptimizerFactory {
 public:
  virtual ~OptimizerFactory() = default;
  virtual double base_lr() const = 0;
  virtual std::unique_ptr<Optimizer> build(const std::vector<NamedParameter>& params) const = 0;
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Multiplier of the base lr at a (1-based) training step.
  virtual double factor(int64_t step) const = 0;
};

}  // namespace titan
