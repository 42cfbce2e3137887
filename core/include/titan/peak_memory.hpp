// The peak of live bytes in LibTorch's CPU allocator while a body runs,
// above the level it started at. Memory contracts are checked with it (no
// rank materializes the whole model; a chunked loss never builds the full
// logits). Process-wide: other threads' CPU allocations count too.
#pragma once
#include <cstdint>
#include <functional>

namespace titan {

int64_t peak_cpu_bytes_during(const std::function<void()>& body);

}  // namespace titan
