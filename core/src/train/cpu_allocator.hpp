// How the process's host memory allocator treats freed tensor memory.
// glibc hands large blocks (above a threshold it moves up to 32 MiB) out of
// fresh mmaps and returns them, and trims the heap top, on free: a step's
// activations are then page-faulted in again every step, which made 1F1B
// slower than GPipe on CPU (its activations are freed and re-allocated
// microbatch by microbatch). "caching" keeps freed memory up to 32 MiB a
// block in the process, as the CUDA caching allocator does for device
// memory.
#pragma once
#include <string>

namespace titan {

// Applies `mode` ("caching" or "system") process-wide; the first call in a
// process decides (a process trains once). Returns what was done, for the log.
std::string configure_cpu_allocator(const std::string& mode);

}  // namespace titan
