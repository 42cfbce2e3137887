// On CPU, what profiling.enable_memory_snapshot records: every allocation
// and free of LibTorch's CPU allocator while it lives (from any thread),
// each with the step and phase it came in, giving a timeline of live bytes,
// its peak and the largest allocations live at the peak. take_window()
// gives one window as JSON (docs/memory_snapshot.md).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "titan/peak_memory.hpp"

namespace titan {

// The phase of a step an allocation came in. It is read from Titan's
// ProfileRanges on the thread that built the timeline ("forward",
// "backward", "optimizer", "validation", and the pipeline's actions: F is
// forward, I, W and B backward), seen through a global RecordFunction
// callback, and holds process-wide: an intra-op or autograd thread's
// allocation during the backward is the backward's.
enum class MemoryPhase : uint8_t { other, forward, backward, optimizer, validation };
const char* memory_phase_name(MemoryPhase phase);

class CpuMemoryTimeline : public CpuAllocationListener {
 public:
  // At most max_samples samples per window (the oldest are dropped beyond,
  // as the CUDA allocator's history keeps its last max_entries), and the
  // top_allocations largest allocations live at the peak.
  explicit CpuMemoryTimeline(size_t max_samples = 100000, size_t top_allocations = 20);
  ~CpuMemoryTimeline() override;
  CpuMemoryTimeline(const CpuMemoryTimeline&) = delete;
  CpuMemoryTimeline& operator=(const CpuMemoryTimeline&) = delete;

  // The step the allocations from now on belong to (0 before the first:
  // init). The first window starts at the first step.
  void set_step(int64_t step);
  // The window since construction or the last call, as JSON text; the next
  // window starts from what is live now. `reason`: "period" or
  // "out_of_memory".
  std::string take_window(const std::string& reason, int rank);

  void allocated(const void* data, int64_t bytes) noexcept override;
  void freed(const void* data, int64_t bytes) noexcept override;
  void failed(int64_t bytes) noexcept override;

 private:
  struct Allocation {
    int64_t bytes = 0;
    double time = 0;
    int64_t step = 0;
    MemoryPhase phase = MemoryPhase::other;
    uint64_t sequence = 0;  // the event that made it
  };
  struct Sample {
    double time;
    int64_t bytes;  // live after the event
    int64_t step;
    MemoryPhase phase;
  };
  struct PhaseTotals {
    int64_t allocations = 0;
    int64_t allocated_bytes = 0;
    int64_t max_live_bytes = 0;
  };
  Allocation event(int64_t bytes);  // the current time, step, phase, next sequence
  void sample(const Allocation& now);
  void start_window();  // under mutex_

  const size_t max_samples_, top_allocations_;
  const std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::mutex mutex_;  // taken inside the tracker's lock, and alone by set_step and take_window
  int64_t step_ = 0;
  int64_t window_first_step_ = -1;
  uint64_t sequence_ = 0;
  int64_t live_bytes_ = 0;
  std::unordered_map<const void*, Allocation> live_;
  std::deque<Sample> samples_;
  int64_t samples_dropped_ = 0;
  Allocation peak_;  // bytes: the window's peak of live bytes; sequence: the event that reached it
  // The largest allocations made before the peak and freed after it (a
  // min-heap of at most top_allocations_): with the live ones made before
  // it, they are what was live at the peak.
  std::vector<Allocation> freed_since_peak_;
  PhaseTotals phases_[5];
  std::optional<Allocation> failure_;  // bytes: the refused request; step, phase, time: when
  int64_t live_at_failure_ = 0;
  std::unique_ptr<CpuMemoryTracker> tracker_;  // last: it stands in for the allocator once all above exist
};

}  // namespace titan
