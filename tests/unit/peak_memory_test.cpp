// The CPU allocator counts behind the memory contracts and benchmarks:
// cpu_memory_during's window, and CpuMemoryTracker's windows one after
// another (take_peak), counting only what was allocated while it stood in.
#include "doctest_torch.hpp"

#include "titan/peak_memory.hpp"

TEST_CASE("cpu_memory_during: the peak of live bytes in its body and what the body left alive") {
  at::Tensor kept;
  titan::CpuMemoryWindow window = titan::cpu_memory_during([&] {
    at::Tensor scratch = at::empty({1 << 20}, at::kFloat);  // 4 MiB, freed inside
    kept = at::empty({1 << 18}, at::kFloat);                // 1 MiB, kept
  });
  CHECK(window.peak >= (5 << 20));
  CHECK(window.retained == (1 << 20));
}

TEST_CASE("CpuMemoryTracker: take_peak ends one window and starts the next from the live bytes") {
  at::Tensor before = at::empty({1 << 20}, at::kFloat);  // not counted: allocated before the tracker
  titan::CpuMemoryTracker tracker;
  before = at::Tensor();
  CHECK(tracker.live() == 0);
  at::Tensor kept = at::empty({1 << 18}, at::kFloat);  // 1 MiB, live across windows
  {
    at::Tensor step = at::empty({1 << 20}, at::kFloat);  // 4 MiB, one window's
  }
  CHECK(tracker.live() == (1 << 20));
  CHECK(tracker.take_peak() == (5 << 20));
  CHECK(tracker.peak() == (1 << 20));  // the new window starts at what is live
  {
    at::Tensor step = at::empty({1 << 19}, at::kFloat);  // 2 MiB
  }
  CHECK(tracker.take_peak() == (3 << 20));
  kept = at::Tensor();
  CHECK(tracker.live() == 0);
}
