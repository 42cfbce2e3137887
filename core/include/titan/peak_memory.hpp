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

// The same count kept open: from construction to destruction it stands in
// for LibTorch's CPU allocator (process-wide), counting the bytes allocated
// since and still live, and their peak. take_peak() starts a new window, so
// code outside a loop (a metrics sink) can measure each of its steps.
class CpuMemoryTracker {
 public:
  CpuMemoryTracker();
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
