// The single-process whole-state checkpointer: <folder>/step-N/ holds
// state.bin (every tensor) and metadata.json (values, checksum) written
// last; a step folder appears only by an atomic rename.
#pragma once
#include <string>

#include "titan/checkpointer.hpp"

namespace titan::checkpoint {

struct CheckpointOptions {
  bool enable = false;
  std::string folder;  // absolute, or relative to the dump folder (resolved)
  int64_t interval = 500;
  int64_t keep_latest_k = 10;  // 0: keep all
  int64_t load_step = -1;      // -1: latest
};

class WholeStateCheckpointer : public Checkpointer {
 public:
  explicit WholeStateCheckpointer(CheckpointOptions options);
  void attach(const CheckpointEnv& env) override;
  bool enabled() const override { return options_.enable; }
  bool should_save(int64_t step, bool last_step) const override;
  void save(int64_t step, const TrainState& state) override;
  std::optional<int64_t> load(TrainState& state) override;

 private:
  void prune() const;
  CheckpointOptions options_;
};

// Steps with a committed checkpoint in `folder`, ascending.
std::vector<int64_t> committed_steps(const std::string& folder);

}  // namespace titan::checkpoint
