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

}  // namespace titan
