// LibTorch's Kineto profiler on TorchTitan's schedule (wait, warm-up,
// active within each profile_freq steps).
#include "step_profiler.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

namespace {

std::set<ActivityType> activities(bool cuda) {
  std::set<ActivityType> kinds{ActivityType::CPU};
  if (cuda) kinds.insert(ActivityType::CUDA);
  return kinds;
}

ProfilerConfig kineto_config() { return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/true); }

}  // namespace

StepProfiler::StepProfiler(const ProfilingConfig& config, const std::string& dump_folder, int rank, bool cuda)
    : config_(config), dump_folder_(dump_folder), rank_(rank), cuda_(cuda) {}

StepProfiler::~StepProfiler() {
  open_ranges_.clear();
  if (recording_ || warming_) {
    try {
      profiler::disableProfiler();  // a run that stopped inside a period: nothing is written
    } catch (const std::exception&) {
    }
  }
}

void StepProfiler::before_step(int64_t step) {
  if (!enabled()) return;
  // Position in the period, 0-based: wait steps, then warm-up, then active.
  const int64_t position = (step - 1) % config_.profile_freq;
  const int64_t wait = config_.profile_freq - config_.profiler_warmup - config_.profiler_active;
  if (position == wait && config_.profiler_warmup > 0 && !warming_ && !recording_) {
    profiler::prepareProfiler(kineto_config(), activities(cuda_));
    warming_ = true;
  }
  if (position == wait + config_.profiler_warmup && !recording_) {
    if (!warming_) profiler::prepareProfiler(kineto_config(), activities(cuda_));
    profiler::enableProfiler(kineto_config(), activities(cuda_));
    warming_ = false;
    recording_ = true;
  }
}

void StepProfiler::after_step(int64_t step) {
  if (!recording_ || step % config_.profile_freq != 0) return;
  open_ranges_.clear();
  std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  recording_ = false;
  namespace fs = std::filesystem;
  const fs::path folder =
      fs::path(dump_folder_) / config_.save_traces_folder / ("iteration_" + std::to_string(step));
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) {
    throw Error("profiling: cannot create " + folder.string() + ": " + error.message() +
                " (check job.dump_folder and profiling.save_traces_folder)");
  }
  const fs::path file = folder / ("rank" + std::to_string(rank_) + "_trace.json");
  result->save(file.string());
  spdlog::info("profiling: wrote {}", file.string());
}

void StepProfiler::on_start(const CollectiveEvent& event) {
  if (!recording_) return;
  std::string name = event.op + " " + event.group + " " + std::to_string(event.bytes) + " B";
  if (event.peer >= 0) name += " peer " + std::to_string(event.peer);
  open_ranges_[{event.group, event.sequence}] = std::make_unique<ProfileRange>(name);
}

void StepProfiler::on_complete(const CollectiveEvent& event, bool /*ok*/) {
  open_ranges_.erase({event.group, event.sequence});  // the range ends with it
}

}  // namespace titan
