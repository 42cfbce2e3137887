// The host allocator setting (cpu_allocator.hpp). Measured by
// titan_bench_pipeline (minor page faults and step time per schedule).
#include "cpu_allocator.hpp"

#include <malloc.h>

#include <mutex>

namespace titan {

std::string configure_cpu_allocator(const std::string& mode) {
  static std::once_flag once;
  static std::string done = "system (glibc's defaults)";
  std::call_once(once, [&] {
    if (mode != "caching") return;
#if defined(__GLIBC__)
    // Every block from the heap, never a private mmap (the threshold alone
    // cannot go above 32 MiB), and the heap top never given back: a freed
    // activation's pages are reused by the next allocation, not faulted in.
    const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
    const bool no_trim = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;  // effectively never below 1 GiB free
    done = no_mmap && no_trim ? "caching (glibc: no mmap for large blocks, no heap trim)"
                              : "system (glibc refused the caching settings)";
#else
    done = "system (not glibc: the caching settings are glibc's)";
#endif
  });
  return done;
}

}  // namespace titan
