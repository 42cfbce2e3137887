// The peak of live bytes in LibTorch's CPU allocator while a body runs,
// above the level it started at. Memory contracts are checked with it (no
// rank materializes the whole model; a chunked loss never builds the full
// logits). Process-wide: other threads' CPU allocations count too.
#pragma once
#include <cstdint>
#include <functional>

namespace titan {

int64_t peak_cpu_bytes_during(const std::function<void()>& body);

// The same window, also giving the bytes allocated in it and still live at
// its end (e.g. the activations autograd saved in a forward whose output the
// body kept outside).
struct CpuMemoryWindow {
  int64_t peak = 0;
  int64_t retained = 0;
};
CpuMemoryWindow cpu_memory_during(const std::function<void()>& body);

// Told of each allocation and free of LibTorch's CPU allocator that a
// CpuMemoryTracker sees, from whichever thread made it, one call at a time
// (the tracker holds a lock around each call: keep them short and never
// allocate LibTorch memory in them).
class CpuAllocationListener {
 public:
  virtual ~CpuAllocationListener() = default;
  virtual void allocated(const void* data, int64_t bytes) noexcept = 0;
  virtual void freed(const void* data, int64_t bytes) noexcept = 0;
  // The allocator refused `bytes` (out of memory); its error goes on up.
  virtual void failed(int64_t bytes) noexcept = 0;
};

// The same count kept open: from construction to destruction it stands in
// for LibTorch's CPU allocator (process-wide), counting the bytes allocated
// since and still live, and their peak. take_peak() starts a new window, so
// code outside a loop (a metrics sink) can measure each of its steps.
// Trackers nest: one built while another stands in wraps it, and each must
// be destroyed before the one it wraps. A listener, if given, hears of the
// allocations made while the tracker lives and their frees until it dies.
class CpuMemoryTracker {
 public:
  explicit CpuMemoryTracker(CpuAllocationListener* listener = nullptr);
  ~CpuMemoryTracker();  // puts the allocator it replaced back
  CpuMemoryTracker(const CpuMemoryTracker&) = delete;
  CpuMemoryTracker& operator=(const CpuMemoryTracker&) = delete;

  int64_t live() const;
  int64_t peak() const;  // since construction or the last take_peak()
  int64_t take_peak();   // peak(), then the peak restarts from live()

 private:
  class Allocator;
  Allocator* allocator_;  // never freed: blocks it handed out may outlive the tracker
};

}  // namespace titan
