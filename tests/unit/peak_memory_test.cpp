// The CPU allocator counts behind the memory contracts and benchmarks:
// cpu_memory_during's window, and CpuMemoryTracker's windows one after
// another (take_peak), counting only what was allocated while it stood in.
#include "doctest_torch.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

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

TEST_CASE("CpuMemoryTracker: a block's context is its data (raw_allocate works under it), and nested trackers each "
          "count it once, the outer one with the inner one's header") {
  titan::CpuMemoryTracker outer;
  {
    titan::CpuMemoryTracker inner;
    // LibTorch's raw_allocate asserts data == context (oneDNN and the bf16
    // kernels allocate this way); raw_deallocate frees through raw_deleter.
    c10::Allocator* allocator = c10::GetCPUAllocator();
    void* raw = allocator->raw_allocate(1 << 20);
    REQUIRE(raw != nullptr);
    // The outer tracker also holds the inner one's header (an alignment unit).
    const int64_t header = static_cast<int64_t>(c10::gAlignment);
    CHECK(inner.live() == (1 << 20));
    CHECK(outer.live() == (1 << 20) + header);
    allocator->raw_deallocate(raw);
    CHECK(inner.live() == 0);
    CHECK(outer.live() == 0);
    at::Tensor both = at::empty({1 << 18}, at::kFloat);  // 1 MiB through both trackers
    CHECK(inner.live() == (1 << 20));
    CHECK(outer.live() == (1 << 20) + header);
    both.fill_(1.0f);
  }
  at::Tensor outer_only = at::empty({1 << 18}, at::kFloat);
  CHECK(outer.live() == (1 << 20));
  outer_only = at::Tensor();
  CHECK(outer.live() == 0);
}
