// The profiling section as TorchTitan runs it: in every period of
// profile_freq steps, the last profiler_active steps are recorded after
// profiler_warmup steps of warm-up, and each rank then writes
// <dump_folder>/<save_traces_folder>/iteration_<step>/rank<r>_trace.json,
// a Chrome trace of LibTorch's ops (and CUDA kernels on a GPU) with Titan's
// ranges: forward, backward, optimizer, pipeline actions and each
// collective with its group and bytes (it watches the comm layer).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "titan/comm_observer.hpp"
#include "titan/job_config.hpp"
#include "titan/profile_range.hpp"

namespace titan {

class StepProfiler : public CommObserver {
 public:
  StepProfiler(const ProfilingConfig& config, const std::string& dump_folder, int rank, bool cuda);
  ~StepProfiler() override;
  bool enabled() const { return config_.enable_profiling; }
  void before_step(int64_t step);  // starts the warm-up or the recording where the period says
  void after_step(int64_t step);   // ends a period's recording and writes the trace

  void on_enqueue(const CollectiveEvent& /*event*/) override {}
  void on_start(const CollectiveEvent& event) override;
  void on_complete(const CollectiveEvent& event, bool ok) override;

 private:
  ProfilingConfig config_;
  std::string dump_folder_;
  int rank_ = 0;
  bool cuda_ = false;
  bool recording_ = false;
  bool warming_ = false;
  // Collectives in flight by (group, sequence): each range ends when its collective completes.
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<ProfileRange>> open_ranges_;
};

}  // namespace titan
