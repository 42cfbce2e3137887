// A host block whose first alignment unit holds the block of the allocator
// beneath (its DataPtr) and what the wrapping allocator keeps about it, the
// caller's bytes starting one unit in: the data pointer is then also the
// DataPtr's context, as LibTorch's own CPU allocator gives it
// (raw_allocate(), used by oneDNN and the bf16 kernels, asserts it), and a
// free finds its block without a lookup or a lock. Shared by
// CpuMemoryTracker (compat.cpp) and the host block cache
// (train/compat_cpu_block_cache.cpp).
#pragma once
#include <c10/core/Allocator.h>
#include <c10/core/alignment.h>

#include <new>
#include <utility>

namespace titan {

template <typename Info>
class HeadedBlock {
 public:
  // One alignment unit keeps the caller's bytes aligned as LibTorch's own.
  static constexpr size_t kHeaderBytes = c10::gAlignment;

  // `inner` holds kHeaderBytes more than the caller asked for; returns the
  // caller's pointer.
  static void* wrap(c10::DataPtr inner, const Info& info) {
    auto* header = static_cast<Header*>(inner.get());
    void* data = static_cast<char*>(inner.get()) + kHeaderBytes;
    new (header) Header{std::move(inner), info};
    return data;
  }

  // The block behind a pointer wrap() returned (its DataPtr still owns the
  // memory: dropping it frees the block) and its info.
  static std::pair<c10::DataPtr, Info> unwrap(void* data) {
    auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
    std::pair<c10::DataPtr, Info> block{std::move(header->inner), header->info};
    header->~Header();
    return block;
  }

 private:
  struct Header {
    c10::DataPtr inner;
    Info info;
  };
  static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit in one alignment unit");
};

}  // namespace titan
