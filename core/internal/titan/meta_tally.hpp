// What the meta device's storage adds up to on one thread while `titan
// plan`'s dry run counts it. Core's meta allocator and its CPU memory
// windows (cpu_memory_during) read the thread's tally; the planner
// (libtitan_plan) sets one per simulated rank and says where a peak is.
// Not part of the SDK: exported from libtitan_core for the planner only.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace titan::internal {

class MetaTally {
 public:
  virtual ~MetaTally() = default;
  // Off while the model is built on meta, as in a real run (where nothing
  // is allocated until the parallelized model is materialized).
  bool counting = false;
  std::atomic<int64_t> live{0};  // meta bytes allocated and not yet freed (frees may come from other threads)
  int64_t peak = 0;
  std::string peak_at;           // where() when the peak was reached
  bool in_backward = false;      // at the peak: inside autograd's backward
  // The place the thread is at, for peak_at.
  virtual std::string where() const { return {}; }
};

// The tally of this thread (null outside a dry run).
MetaTally* current_meta_tally();

class MetaTallyScope {
 public:
  explicit MetaTallyScope(MetaTally& tally);
  ~MetaTallyScope();
  MetaTallyScope(const MetaTallyScope&) = delete;
  MetaTallyScope& operator=(const MetaTallyScope&) = delete;
};

// Process-wide, once: meta tensors' storage is counted into the tally of
// the allocating thread (the allocator interface is LibTorch's: compat.cpp).
void install_meta_allocator();

}  // namespace titan::internal
