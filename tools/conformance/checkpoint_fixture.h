// The train state the checkpointer checks save and load: shaped like a
// model's (uneven and empty shards, bf16, a scalar, per-rank RNG bytes),
// with global values that are a pure function of each tensor's name, so any
// layout on any world size knows exactly what its local pieces must hold.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "titan/checkpointer.hpp"

namespace titan {
class DeviceMesh;
}

namespace titan::conformance {

// How the state is laid out over the ranks: "single" (one process, no
// mesh), "fsdp" (dim 0 over dp_shard), "hsdp" (dp_replicate=2 x dp_shard),
// "ddp" (whole tensors on every rank), "tp" (the last dim over tp).
std::map<std::string, int64_t> checkpoint_mesh_degrees(const std::string& layout, int world_size);
void validate_checkpoint_layout(const std::string& layout, int world_size);

// The state to save (filled with the exact values, `values` set, RNG bytes
// of this rank) or to load into (zeros, no values). `mesh` is null for "single".
TrainState make_checkpoint_state(const std::string& layout, const DeviceMesh* mesh, int rank, bool filled);

// Overwrites every tensor of `state` (async checks: after save() returned,
// only a copy staged by save() can still hold the right values).
void scribble_over(TrainState& state);

// Compares a loaded state with what this rank must hold, bit for bit.
// `held` are the tensors of the state before load (load fills in place).
struct StateComparison {
  int wrong_tensors = 0;
  std::string first_wrong;  // "model.embed: 12 of 96 elements differ"
  bool values_ok = false;
  std::string values_detail;
  bool rank_local_ok = false;  // same world: this rank's bytes; another world: none restored
  std::string rank_local_detail;
};
StateComparison compare_loaded(std::optional<int64_t> step, const TrainState& loaded,
                               const std::map<std::string, at::Tensor>& held, const std::string& layout,
                               const DeviceMesh* mesh, int rank, bool same_world);

// The step the checks save at.
constexpr int64_t kCheckpointStep = 7;

}  // namespace titan::conformance
