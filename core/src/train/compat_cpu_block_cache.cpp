// The host block cache (cpu_block_cache.hpp): a c10::Allocator, whose
// interface changes between LibTorch versions, hence a compat source.
#include "cpu_block_cache.hpp"

#include "headed_block.hpp"

#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace titan {

namespace {

class CpuBlockCache : public c10::Allocator {
 public:
  explicit CpuBlockCache(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) override {
    if (bytes == 0 || bytes > kMaxCachedBlock) return base_->allocate(bytes);
    // Sizes rounded to the alignment unit: a step's tensors repeat exactly.
    const size_t size = (bytes + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes;
    c10::DataPtr inner;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = free_.find(size);
      if (found != free_.end() && !found->second.empty()) {
        inner = std::move(found->second.back());
        found->second.pop_back();
        cached_bytes_ -= static_cast<int64_t>(size);
        --cached_blocks_;
        ++hits_;
      } else {
        ++misses_;
      }
    }
    if (!inner) inner = base_->allocate(size + kHeaderBytes);
    void* data = Block::wrap(std::move(inner), {size, this});
    return {data, data, &CpuBlockCache::release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CpuBlockCache::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  CpuBlockCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_bytes_, cached_blocks_, hits_, misses_};
  }

 private:
  struct Sized {
    size_t size;
    CpuBlockCache* owner;
  };
  using Block = HeadedBlock<Sized>;  // the allocator beneath's block, the caller's bytes one unit in
  static constexpr size_t kHeaderBytes = Block::kHeaderBytes;

  static void release(void* data) {
    if (data == nullptr) return;
    auto [inner, sized] = Block::unwrap(data);
    const size_t size = sized.size;
    CpuBlockCache* owner = sized.owner;
    std::lock_guard<std::mutex> lock(owner->mutex_);
    if (owner->cached_bytes_ + static_cast<int64_t>(size) > static_cast<int64_t>(kMaxCachedBytes)) return;
    owner->free_[size].push_back(std::move(inner));
    owner->cached_bytes_ += static_cast<int64_t>(size);
    ++owner->cached_blocks_;
  }  // beyond the cap, `inner` frees the block here, after the lock is let go

  c10::Allocator* base_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<c10::DataPtr>> free_;  // by size, guarded by mutex_
  int64_t cached_bytes_ = 0, cached_blocks_ = 0, hits_ = 0, misses_ = 0;
};

// Never destroyed: blocks it handed out may be freed at any time, even
// during the process's exit.
CpuBlockCache* cache = nullptr;
std::once_flag installed;

}  // namespace

void install_cpu_block_cache() {
  std::call_once(installed, [] {
    cache = new CpuBlockCache(c10::GetCPUAllocator());
    c10::SetCPUAllocator(cache, /*priority=*/255);
  });
}

CpuBlockCacheStats cpu_block_cache_stats() { return cache ? cache->stats() : CpuBlockCacheStats{}; }

}  // namespace titan
