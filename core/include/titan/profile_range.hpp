// A named range in the profiler's trace (LibTorch's RecordFunction, user
// scope): Titan's own phases (forward, backward, optimizer, pipeline
// actions, collectives) beside LibTorch's ops in the Chrome trace. Costs a
// check of a thread-local flag when no profiler is on.
#pragma once
#include <ATen/record_function.h>

#include <memory>
#include <string>

namespace titan {

// The range around activation checkpointing's forward run again in the
// backward (the dry run counts its FLOPs as recompute).
inline constexpr const char* kRecomputeRange = "activation checkpoint recompute";

class ProfileRange {
 public:
  explicit ProfileRange(const std::string& name) {
    if (!at::hasCallbacks()) return;
    record_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (record_->isActive()) {
      record_->before(name);
    } else {
      record_.reset();
    }
  }
  ~ProfileRange() {
    if (record_) record_->end();
  }
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  std::unique_ptr<at::RecordFunction> record_;
};

}  // namespace titan
