// The host block cache behind training.cpu_allocator: caching
// (train/cpu_block_cache.hpp): a freed block comes back for the next
// allocation of its size, blocks above 1 MiB and bytes above the cap go back
// to the allocator beneath, pointers stay aligned with data == context, and
// the memory trackers installed after it still count every byte.
#include "doctest_torch.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <cstdint>
#include <vector>

#include "titan/peak_memory.hpp"
#include "train/cpu_block_cache.hpp"

TEST_CASE("cpu block cache: a freed block serves the next allocation of its size; large blocks and the cap pass it by") {
  titan::install_cpu_block_cache();
  titan::install_cpu_block_cache();  // once per process: a second call changes nothing
  const titan::CpuBlockCacheStats start = titan::cpu_block_cache_stats();

  const void* first = nullptr;
  {
    at::Tensor block = at::empty({1000}, at::kFloat);
    first = block.data_ptr();
    CHECK(reinterpret_cast<uintptr_t>(first) % c10::gAlignment == 0);
  }
  titan::CpuBlockCacheStats after_free = titan::cpu_block_cache_stats();
  CHECK(after_free.cached_blocks == start.cached_blocks + 1);
  {
    at::Tensor again = at::empty({1000}, at::kFloat);  // the same size: the same block
    CHECK(again.data_ptr() == first);
    // Rounded to the same 64-byte size, but that size's one block is in use: a new one.
    at::Tensor other = at::empty({999}, at::kFloat);
    CHECK(other.data_ptr() != first);
    CHECK(titan::cpu_block_cache_stats().hits == start.hits + 1);
  }
  // A block above kMaxCachedBlock is never kept.
  const int64_t cached_before_large = titan::cpu_block_cache_stats().cached_bytes;
  { at::Tensor large = at::empty({static_cast<int64_t>(titan::kMaxCachedBlock / 4 + 16)}, at::kFloat); }
  CHECK(titan::cpu_block_cache_stats().cached_bytes == cached_before_large);

  // The cap: free more than kMaxCachedBytes of 1 MiB blocks at once.
  {
    std::vector<at::Tensor> blocks;
    const int64_t count = static_cast<int64_t>(titan::kMaxCachedBytes / titan::kMaxCachedBlock) + 8;
    for (int64_t i = 0; i < count; ++i) blocks.push_back(at::empty({static_cast<int64_t>(titan::kMaxCachedBlock / 4)}, at::kFloat));
  }
  CHECK(titan::cpu_block_cache_stats().cached_bytes <= static_cast<int64_t>(titan::kMaxCachedBytes));
  CHECK(titan::cpu_block_cache_stats().cached_bytes > static_cast<int64_t>(titan::kMaxCachedBytes) - (2 << 20));

  // raw_allocate (oneDNN's and the bf16 kernels' way in) needs data == context.
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* raw = allocator->raw_allocate(4096);
  REQUIRE(raw != nullptr);
  allocator->raw_deallocate(raw);
}

TEST_CASE("cpu block cache: a tracker installed after it counts every byte, cached or not") {
  titan::install_cpu_block_cache();
  { at::Tensor warm = at::empty({1 << 16}, at::kFloat); }  // 256 KiB now in the cache
  titan::CpuMemoryTracker tracker;
  at::Tensor reused = at::empty({1 << 16}, at::kFloat);
  CHECK(tracker.live() == (1 << 18));
  reused = at::Tensor();
  CHECK(tracker.live() == 0);
  CHECK(tracker.peak() == (1 << 18));
}
