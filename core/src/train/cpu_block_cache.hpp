// A cache of freed host blocks in front of LibTorch's CPU allocator, for
// the training.cpu_allocator "caching" mode: a step allocates and frees the
// same sizes every step, and glibc's malloc and free of those blocks (with
// the consolidation that frees of 64 KiB and more start) took 9-16% of a
// small model's step. Blocks up to kMaxCachedBlock bytes are kept, by
// size, for the next allocation of that size, up to kMaxCachedBytes in all;
// larger ones and any beyond the cap go back to the allocator beneath.
// (compat_cpu_block_cache.cpp: it follows c10::Allocator's interface.)
#pragma once
#include <cstddef>
#include <cstdint>

namespace titan {

inline constexpr size_t kMaxCachedBlock = size_t{1} << 20;
inline constexpr size_t kMaxCachedBytes = size_t{256} << 20;

// Puts the cache in front of the current CPU allocator, once per process
// (later calls do nothing): allocators installed after it (the memory
// trackers) wrap it.
void install_cpu_block_cache();

// What the cache holds now and how often it served an allocation (tests).
struct CpuBlockCacheStats {
  int64_t cached_bytes = 0;
  int64_t cached_blocks = 0;
  int64_t hits = 0;
  int64_t misses = 0;
};
CpuBlockCacheStats cpu_block_cache_stats();

}  // namespace titan
