// The sharded checkpointer: each rank writes the pieces it owns (the first
// copy of every shard), rank 0 commits one metadata.json describing all of
// them, and any mesh can load it back by reading the overlapping rows.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "background_save.h"
#include "checkpoint_metadata.h"
#include "titan/checkpointer.hpp"

namespace titan::dcp {

enum class AsyncMode { disabled, async, async_with_pinned_mem };

struct DcpOptions {
  bool enable = false;
  std::string folder;  // resolved
  int64_t interval = 500;
  AsyncMode async_mode = AsyncMode::disabled;
  int64_t keep_latest_k = 10;  // 0: keep all
  int64_t load_step = -1;      // -1: the newest intact one
  std::string initial_load_path;
  bool last_save_model_only = false;
  at::ScalarType export_dtype = at::kFloat;  // of the model-only last save
  int64_t training_steps = 0;
};

// What one rank hands to the writer: its pieces copied off the live state.
struct StagedSave {
  int64_t step = 0;
  std::vector<Piece> pieces;
  CheckpointMetadata fragment;  // every tensor's dtype and shape; shards filled by the writer
};

class DcpCheckpointer : public Checkpointer {
 public:
  explicit DcpCheckpointer(DcpOptions options);
  void attach(const CheckpointEnv& env) override;
  bool enabled() const override { return options_.enable; }
  bool should_save(int64_t step, bool last_step) const override;
  void save(int64_t step, const TrainState& state) override;
  std::optional<int64_t> load(TrainState& state) override;
  void poll() override { background_.poll(); }
  void wait() override { background_.wait(); }

  std::string initial_load_path() const override { return options_.initial_load_path; }
  std::vector<std::string> model_tensor_names(const std::string& step_dir) const override;
  at::Tensor read_model_tensor(const std::string& step_dir, const std::string& name) const override;
  void write_model(const std::string& step_dir, const std::map<std::string, at::Tensor>& tensors,
                   const std::string& config_yaml) const override;

 private:
  StagedSave stage(int64_t step, const TrainState& state);
  at::Tensor staging_copy(const std::string& name, const at::Tensor& tensor, at::ScalarType dtype);
  void write(const StagedSave& staged) const;
  // Rank 0: writes metadata.json and config.yaml, renames, prunes.
  void commit(const StagedSave& staged, const std::vector<std::string>& fragments) const;
  void fill(const std::string& dir, const CheckpointMetadata& metadata, TrainState& state) const;
  const CheckpointMetadata& cached_metadata(const std::string& step_dir) const;

  DcpOptions options_;
  CheckpointEnv env_;
  BackgroundSave background_;
  std::map<std::string, at::Tensor> staging_;  // reused between async saves
  mutable std::string cached_dir_;
  mutable CheckpointMetadata cached_;
};

}  // namespace titan::dcp
