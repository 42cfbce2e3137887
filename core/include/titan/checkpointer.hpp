// Checkpointer: saves and restores the whole train state. The state is a
// flat set of named tensors (restored in place) plus named text values.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace titan {

struct TrainState {
  std::map<std::string, at::Tensor> tensors;  // "model.x", "optim.x.exp_avg", "rng.cpu"
  std::map<std::string, std::string> values;  // "step", "data.position", ...
};

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  virtual bool enabled() const = 0;
  virtual bool should_save(int64_t step, bool last_step) const = 0;
  virtual void save(int64_t step, const TrainState& state) = 0;
  // Loads the configured checkpoint (latest by default) into `state`'s
  // tensors in place and its values; returns the step, or none if no
  // checkpoint exists. A corrupt checkpoint is a titan::Error.
  virtual std::optional<int64_t> load(TrainState& state) = 0;
  // Blocks until background saves are done; rethrows their errors.
  virtual void wait() {}
};

}  // namespace titan
