// The memory figures of each logged step as TorchTitan logs them: the peaks
// of active and reserved bytes since the previous log, in GiB and as a share
// of the device's memory, and the CUDA allocator's retries and OOMs.
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

#include "titan/peak_memory.hpp"

namespace titan {

struct MemorySample {
  double max_active_gib = 0, max_active_pct = 0;
  double max_reserved_gib = 0, max_reserved_pct = 0;
  int64_t alloc_retries = 0, ooms = 0;  // CUDA's counts since the start; 0 on CPU
};

class MemoryMetrics {
 public:
  // On CPU this starts counting LibTorch's CPU allocator, so build it
  // before the model: its parameters are active bytes too.
  explicit MemoryMetrics(const c10::Device& device);
  ~MemoryMetrics();
  // The peaks since construction or the previous take(); then a new window.
  MemorySample take();

 private:
  c10::Device device_;
  int64_t capacity_bytes_;  // the device's memory (CPU: RAM, or the cgroup's limit when lower)
  std::unique_ptr<CpuMemoryTracker> cpu_active_;
};

// CPU: the peak resident set since the start or the last reset (VmHWM).
int64_t peak_resident_bytes();
// Restarts peak_resident_bytes() from the current resident set; false where
// the kernel does not allow it (the peak then stays the run's).
bool reset_peak_resident_bytes();

}  // namespace titan
