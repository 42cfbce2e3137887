// at::parallel_for on LibTorch's own OpenMP threads, for kernels built by
// any compiler. The wheel's LibTorch runs its intra-op work on GCC's OpenMP
// runtime (libgomp); at::parallel_for is inline, so a file compiled without
// -fopenmp runs it serially, and clang cannot generate calls to libgomp at
// all (its OpenMP is LLVM's runtime, a second thread pool that
// at::set_num_threads would not reach). This calls libgomp through its C
// entry points instead, exactly as GCC's `#pragma omp parallel` does, with
// at::parallel_for's rules: the same chunks, no nesting, serial below the
// grain, and a worker's exception rethrown on the calling thread.
#pragma once

#include <cstdint>

namespace titan::fused {

namespace detail {
using RangeBody = void (*)(const void* body, int64_t begin, int64_t end);
void run_on_libtorch_threads(int64_t begin, int64_t end, int64_t grain_size, RangeBody call, const void* body);
}  // namespace detail

// f(begin, end) over [begin, end) in chunks of at least grain_size, one per
// LibTorch intra-op thread, as at::parallel_for(begin, end, grain_size, f).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const F& f) {
  detail::run_on_libtorch_threads(
      begin, end, grain_size, [](const void* body, int64_t b, int64_t e) { (*static_cast<const F*>(body))(b, e); },
      &f);
}

}  // namespace titan::fused
