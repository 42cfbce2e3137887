// The host allocator setting (cpu_allocator.hpp). Measured by
// titan_bench_pipeline (minor page faults and step time per schedule).
#include "cpu_allocator.hpp"

#include "cpu_block_cache.hpp"

#include <malloc.h>

#include <mutex>

namespace titan {

std::string configure_cpu_allocator(const std::string& mode) {
  static std::once_flag once;
  static std::string done = "system (glibc's defaults)";
  std::call_once(once, [&] {
    if (mode != "caching") return;
#if defined(__GLIBC__)
    // Blocks up to glibc's largest mmap threshold (32 MiB: activations,
    // their gradients, temporaries) from the heap, and the heap top never
    // given back: a freed activation's pages are reused by the next
    // allocation, not faulted in again. Larger blocks (whole weights, flat
    // FSDP buffers) keep their own mmaps, which keeps the heap from
    // fragmenting around them.
    const bool threshold = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
    const bool no_trim = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;  // effectively never below 1 GiB free
    const std::string glibc = threshold && no_trim ? "; glibc: blocks up to 32 MiB from the heap, no heap trim"
                                                   : "; glibc refused its settings";
#else
    const std::string glibc;
#endif
    install_cpu_block_cache();
    done = "caching (freed blocks up to " + std::to_string(kMaxCachedBlock >> 20) + " MiB kept by size, " +
           std::to_string(kMaxCachedBytes >> 20) + " MiB in all" + glibc + ")";
  });
  return done;
}

}  // namespace titan
