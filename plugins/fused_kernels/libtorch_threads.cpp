// titan::fused::parallel_for (libtorch_threads.h): libgomp's C entry points,
// the ones GCC emits for `#pragma omp parallel`, bound to the wheel's
// libgomp.so.1 (CMakeLists.txt), which LibTorch's threads already use.
#include "libtorch_threads.h"

#include <ATen/Parallel.h>
#include <c10/util/ParallelGuard.h>

#include <algorithm>
#include <atomic>
#include <exception>

extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
int omp_get_num_threads();
int omp_get_thread_num();
}

namespace titan::fused::detail {

namespace {
struct Region {
  Region(int64_t begin, int64_t end, int64_t grain_size, RangeBody call, const void* body)
      : begin(begin), end(end), grain_size(grain_size), call(call), body(body) {}
  const int64_t begin, end, grain_size;
  const RangeBody call;
  const void* const body;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
};

// One thread's share, as at::internal::invoke_parallel computes it.
void run_share(void* data) {
  auto& region = *static_cast<Region*>(data);
  int64_t threads = omp_get_num_threads();
  if (region.grain_size > 0) threads = std::min(threads, at::divup(region.end - region.begin, region.grain_size));
  int64_t tid = omp_get_thread_num();
  int64_t chunk = at::divup(region.end - region.begin, threads);
  int64_t begin = region.begin + tid * chunk;
  if (begin >= region.end) return;
  try {
    at::internal::ThreadIdGuard tid_guard(static_cast<int>(tid));
    c10::ParallelGuard guard(true);
    region.call(region.body, begin, std::min(region.end, begin + chunk));
  } catch (...) {
    if (!region.failed.test_and_set()) region.error = std::current_exception();
  }
}
}  // namespace

void run_on_libtorch_threads(int64_t begin, int64_t end, int64_t grain_size, RangeBody call, const void* body) {
  if (begin >= end) return;
  at::internal::lazy_init_num_threads();
  int64_t iterations = end - begin;
  if (iterations <= grain_size || iterations <= 1 || at::in_parallel_region() || at::get_num_threads() <= 1) {
    at::internal::ThreadIdGuard tid_guard(0);
    c10::ParallelGuard guard(true);
    call(body, begin, end);
    return;
  }
  Region region(begin, end, grain_size, call, body);
  GOMP_parallel(run_share, &region, /*num_threads: the runtime's (at::set_num_threads)*/ 0, /*flags*/ 0);
  if (region.error) std::rethrow_exception(region.error);
}

}  // namespace titan::fused::detail
