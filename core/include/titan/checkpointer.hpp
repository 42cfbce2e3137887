// Checkpointer: saves and restores the whole train state. The state is a
// set of named tensors (restored in place; sharded ones carry their
// layout) plus named text values.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "titan/placement.hpp"

namespace titan {

class Comm;
class DeviceMesh;

struct TrainState {
  std::map<std::string, at::Tensor> tensors;  // "model.x", "optim.x.exp_avg"
  std::map<std::string, std::string> values;  // "step", "data.position", ...
  // Where a sharded tensor's local piece sits in its global tensor. A
  // tensor without a layout is whole and equal on every rank.
  std::map<std::string, TensorLayout> layouts;
  // Per-rank tensors with no global meaning ("rng.cpu"): restored only
  // when the world size is unchanged.
  std::map<std::string, at::Tensor> rank_local;
};

// What a checkpointer knows of the job. `comm` spans all ranks and is
// reserved for checkpointing, so a background thread may use it while
// training uses the others.
struct CheckpointEnv {
  int rank = 0;
  int world_size = 1;
  const DeviceMesh* mesh = nullptr;  // null on one process
  Comm* comm = nullptr;              // null on one process
  std::string config_yaml;           // the resolved config, kept with each checkpoint
};

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  // Called once before load/save; a checkpointer that cannot serve this
  // job (e.g. many processes) throws a titan::Error saying what to use.
  virtual void attach(const CheckpointEnv& /*env*/) {}
  virtual bool enabled() const = 0;
  virtual bool should_save(int64_t step, bool last_step) const = 0;
  virtual void save(int64_t step, const TrainState& state) = 0;
  // Loads the configured checkpoint (latest by default) into `state`'s
  // tensors in place and its values; returns the step, or none if no
  // checkpoint exists. A corrupt checkpoint is a titan::Error.
  virtual std::optional<int64_t> load(TrainState& state) = 0;
  // Called after every step: rethrows the error of a background save that
  // failed since, so no failure goes unnoticed until the next save.
  virtual void poll() {}
  // Blocks until background saves are done; rethrows their errors.
  virtual void wait() {}

  // Model weights to start from when there is nothing to resume
  // (checkpoint.initial_load_path): a checkpoint step folder or a Hugging
  // Face safetensors folder; empty for none.
  virtual std::string initial_load_path() const { return {}; }
  // Model-only access to a saved step folder, without collectives: the
  // parameter names ("model." dropped), one whole parameter (CPU), and the
  // writing of a model-only checkpoint from whole tensors (import).
  virtual std::vector<std::string> model_tensor_names(const std::string& step_dir) const;
  virtual at::Tensor read_model_tensor(const std::string& step_dir, const std::string& name) const;
  virtual void write_model(const std::string& step_dir, const std::map<std::string, at::Tensor>& tensors,
                           const std::string& config_yaml) const;
};

}  // namespace titan
