// One rank of `titan plan`'s dry run, as its thread sees itself: the
// simulated job it belongs to, and what it measures while it runs the real
// trainer on meta tensors (no values, no memory): the bytes the meta
// allocator hands out and their peak, the FLOPs of every matmul and
// attention kernel, and every collective it issues.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "simulated_world.hpp"
#include "titan/comm_observer.hpp"
#include "titan/meta_tally.hpp"

namespace titan {

// Core's meta tally (its allocator counts the bytes into it) plus what the
// planner measures around it.
struct DryRankTally : internal::MetaTally {
  double flops = 0;              // matmul and attention FLOPs since the last restart_flops()
  double recompute_flops = 0;    // the part of them run again by activation checkpointing
  std::string phase;             // set by the driver: "build", "step 1", ...
  std::vector<std::string> ranges;  // the open ProfileRanges (forward, backward, pipeline F0 ...)
  int recomputing = 0;           // inside kRecomputeRange
  // The measured step's ops that would make the host wait for a GPU
  // (train/host_read_counter.hpp), and where the first were.
  int64_t host_waits = 0;
  std::vector<std::string> host_wait_sites;

  void restart_peak() {
    peak = live.load();
    peak_at = phase;
  }
  void restart_flops() { flops = recompute_flops = 0; }
  void add_flops(double count);  // recompute too while inside kRecomputeRange
  std::string where() const override;
};

struct DryRank {
  int rank = 0;
  SimulatedWorld* world = nullptr;
  std::vector<CollectiveEvent> events;
  DryRankTally tally;
};

// The dry-run rank this thread runs (null outside a dry run).
DryRank* current_dry_rank();

class DryRankScope {
 public:
  explicit DryRankScope(DryRank& rank);
  ~DryRankScope();
  DryRankScope(const DryRankScope&) = delete;
  DryRankScope& operator=(const DryRankScope&) = delete;

 private:
  internal::MetaTallyScope tally_;
};

// Process-wide, once, beside core's internal::install_meta_allocator
// (which counts meta tensors' storage into the thread's tally): the Meta
// kernels of the matmuls count their FLOPs into the rank's tally
// (meta_kernels.cpp; the attention kernels always do); ProfileRanges are
// kept as its place (range_tracker.cpp).
void install_counting_matmuls();
void install_range_tracker();

}  // namespace titan
