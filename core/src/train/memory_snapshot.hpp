// profiling.enable_memory_snapshot as TorchTitan runs it: each rank writes
// what fills its memory every profile_freq steps, to
// <dump_folder>/<save_memory_snapshot_folder>/iteration_<step>/
// rank<r>_memory_snapshot.pickle on CUDA (the caching allocator's history,
// for pytorch.org/memory_viz) or .json on CPU (CpuMemoryTimeline), and to
// iteration_<last finished step>_exit/ when a step runs out of memory. Such
// an error, snapshots on or off, becomes one that names the step, the
// snapshot and what to change, and the run still fails
// (docs/memory_snapshot.md).
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "titan/job_config.hpp"

namespace titan {

class CpuMemoryTimeline;

class MemorySnapshot {
 public:
  MemorySnapshot(const ProfilingConfig& config, const std::string& dump_folder, int rank, const c10::Device& device);
  ~MemorySnapshot();
  MemorySnapshot(const MemorySnapshot&) = delete;
  MemorySnapshot& operator=(const MemorySnapshot&) = delete;

  bool enabled() const { return config_.enable_memory_snapshot; }
  void before_step(int64_t step);  // the step the CPU timeline's allocations belong to
  void after_step(int64_t step);   // a step % profile_freq == 0 writes the period's snapshot

  // Runs `body`, part of the loop after step `done_step` finished (the next
  // step, or the validation after it; `what` names it in messages). An
  // out-of-memory error in it writes the snapshot (when enabled) and is
  // replaced by a titan::Error saying what ran out and what to do; any
  // other error passes unchanged.
  template <typename Body>
  auto watch(const std::string& what, int64_t done_step, Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const std::exception& error) {
      fail_if_out_of_memory(error, what, done_step);
      throw;
    }
  }

 private:
  void fail_if_out_of_memory(const std::exception& error, const std::string& what, int64_t done_step);
  std::string write(const std::string& iteration, const std::string& reason);  // the file written

  ProfilingConfig config_;
  std::string dump_folder_;
  int rank_ = 0;
  c10::Device device_;
  bool recording_cuda_ = false;
  std::unique_ptr<CpuMemoryTimeline> cpu_;
};

}  // namespace titan
