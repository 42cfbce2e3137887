// The CPU memory timeline: allocator events from a CpuMemoryTracker, the
// phase from Titan's ranges through a RecordFunction callback.
#include "cpu_memory_timeline.hpp"

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "titan/pipeline_schedule.hpp"

namespace titan {

namespace {

constexpr MemoryPhase kPhases[] = {MemoryPhase::other, MemoryPhase::forward, MemoryPhase::backward,
                                   MemoryPhase::optimizer, MemoryPhase::validation};

// The phase in force (process-wide) and the thread whose ranges set it.
// RecordFunction callbacks are plain function pointers, hence globals: one
// timeline at a time.
std::atomic<MemoryPhase> current_phase{MemoryPhase::other};
std::atomic<uint64_t> phase_thread{0};
std::atomic<bool> timeline_exists{false};

std::optional<MemoryPhase> phase_of_range(std::string_view name) {
  if (name == "forward") return MemoryPhase::forward;
  if (name == "backward") return MemoryPhase::backward;
  if (name == "optimizer") return MemoryPhase::optimizer;
  if (name == "validation") return MemoryPhase::validation;
  constexpr std::string_view pipeline = "pipeline ";  // the executor's "pipeline 0F3"
  if (name.substr(0, pipeline.size()) != pipeline) return std::nullopt;
  try {
    const ActionType type = Action::parse(std::string(name.substr(pipeline.size()))).type;
    if (type == ActionType::forward) return MemoryPhase::forward;
    if (is_compute(type)) return MemoryPhase::backward;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

struct PhaseContext : at::ObserverContext {
  explicit PhaseContext(MemoryPhase previous) : previous(previous) {}
  MemoryPhase previous;
};

std::unique_ptr<at::ObserverContext> range_started(const at::RecordFunction& range) {
  if (at::RecordFunction::currentThreadId() != phase_thread.load(std::memory_order_relaxed)) return nullptr;
  const std::optional<MemoryPhase> phase = phase_of_range(range.name());
  // A pipelined validation runs forward actions: still the validation's.
  if (!phase || current_phase.load() == MemoryPhase::validation) return nullptr;
  return std::make_unique<PhaseContext>(current_phase.exchange(*phase));
}

void range_ended(const at::RecordFunction& /*range*/, at::ObserverContext* context) {
  if (context) current_phase = static_cast<PhaseContext*>(context)->previous;
}

at::CallbackHandle phase_callback = at::INVALID_CALLBACK_HANDLE;

}  // namespace

const char* memory_phase_name(MemoryPhase phase) {
  switch (phase) {
    case MemoryPhase::forward: return "forward";
    case MemoryPhase::backward: return "backward";
    case MemoryPhase::optimizer: return "optimizer";
    case MemoryPhase::validation: return "validation";
    case MemoryPhase::other: break;
  }
  return "other";
}

CpuMemoryTimeline::CpuMemoryTimeline(size_t max_samples, size_t top_allocations)
    : max_samples_(std::max<size_t>(1, max_samples)), top_allocations_(std::max<size_t>(1, top_allocations)) {
  if (timeline_exists.exchange(true)) {
    throw std::logic_error("a CPU memory timeline already exists in this process (one at a time)");
  }
  phase_thread = at::RecordFunction::currentThreadId();
  current_phase = MemoryPhase::other;
  phase_callback = at::addGlobalCallback(
      at::RecordFunctionCallback(&range_started, &range_ended).scopes({at::RecordScope::USER_SCOPE}));
  tracker_ = std::make_unique<CpuMemoryTracker>(this);
}

CpuMemoryTimeline::~CpuMemoryTimeline() {
  tracker_.reset();  // no allocator call reaches this object from here on
  at::removeCallback(phase_callback);
  phase_callback = at::INVALID_CALLBACK_HANDLE;
  current_phase = MemoryPhase::other;
  timeline_exists = false;
}

void CpuMemoryTimeline::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The first window starts at the first step: what init allocated and
  // still holds (the model, say) is live there, its own peak is not.
  if (step_ == 0) start_window();
  step_ = step;
  if (window_first_step_ < 0) window_first_step_ = step;
}

void CpuMemoryTimeline::start_window() {
  samples_.clear();
  samples_dropped_ = 0;
  peak_ = event(0);
  peak_.bytes = live_bytes_;
  freed_since_peak_.clear();
  for (PhaseTotals& totals : phases_) totals = PhaseTotals{};
  failure_.reset();
  window_first_step_ = -1;
}

CpuMemoryTimeline::Allocation CpuMemoryTimeline::event(int64_t bytes) {
  const double time = std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  return {bytes, time, step_, current_phase.load(std::memory_order_relaxed), ++sequence_};
}

void CpuMemoryTimeline::sample(const Allocation& now) {
  samples_.push_back({now.time, live_bytes_, now.step, now.phase});
  if (samples_.size() > max_samples_) {
    samples_.pop_front();
    ++samples_dropped_;
  }
  PhaseTotals& totals = phases_[static_cast<size_t>(now.phase)];
  totals.max_live_bytes = std::max(totals.max_live_bytes, live_bytes_);
}

namespace {

// Orders a min-heap by size: the smallest kept allocation on top.
template <typename A>
bool larger(const A& a, const A& b) {
  return a.bytes > b.bytes || (a.bytes == b.bytes && a.sequence < b.sequence);
}

}  // namespace

void CpuMemoryTimeline::allocated(const void* data, int64_t bytes) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    const Allocation now = event(bytes);
    live_[data] = now;
    live_bytes_ += bytes;
    PhaseTotals& totals = phases_[static_cast<size_t>(now.phase)];
    ++totals.allocations;
    totals.allocated_bytes += bytes;
    if (live_bytes_ > peak_.bytes) {
      peak_ = now;
      peak_.bytes = live_bytes_;
      freed_since_peak_.clear();
    }
    sample(now);
  } catch (const std::exception&) {
    // Out of host memory for the bookkeeping itself: this event is lost.
  }
}

void CpuMemoryTimeline::freed(const void* data, int64_t bytes) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    const Allocation now = event(-bytes);
    auto found = live_.find(data);
    if (found != live_.end()) {
      if (found->second.sequence <= peak_.sequence) {
        freed_since_peak_.push_back(found->second);
        std::push_heap(freed_since_peak_.begin(), freed_since_peak_.end(), larger<Allocation>);
        if (freed_since_peak_.size() > top_allocations_) {
          std::pop_heap(freed_since_peak_.begin(), freed_since_peak_.end(), larger<Allocation>);
          freed_since_peak_.pop_back();
        }
      }
      live_.erase(found);
    }
    live_bytes_ -= bytes;
    sample(now);
  } catch (const std::exception&) {
  }
}

void CpuMemoryTimeline::failed(int64_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = event(bytes);
  live_at_failure_ = live_bytes_;
}

std::string CpuMemoryTimeline::take_window(const std::string& reason, int rank) {
  using nlohmann::json;
  auto describe = [](const Allocation& a) {
    return json{{"bytes", a.bytes}, {"time", a.time}, {"step", a.step}, {"phase", memory_phase_name(a.phase)}};
  };
  json out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // What was live at the peak: the live allocations made before it, and
    // those made before it and freed since.
    std::vector<Allocation> at_peak = freed_since_peak_;
    for (const auto& [data, allocation] : live_) {
      if (allocation.sequence <= peak_.sequence) at_peak.push_back(allocation);
    }
    const size_t keep = std::min(top_allocations_, at_peak.size());
    std::partial_sort(at_peak.begin(), at_peak.begin() + static_cast<std::ptrdiff_t>(keep), at_peak.end(),
                      larger<Allocation>);
    at_peak.resize(keep);

    out["format"] = "titan.cpu_memory_snapshot";
    out["version"] = 1;
    out["rank"] = rank;
    out["device"] = "cpu";
    out["reason"] = reason;
    out["steps"] = {{"first", window_first_step_ < 0 ? step_ : window_first_step_}, {"last", step_}};
    json samples = json::array();
    for (const Sample& s : samples_) {
      samples.push_back({{"time", s.time}, {"bytes", s.bytes}, {"step", s.step}, {"phase", memory_phase_name(s.phase)}});
    }
    out["samples"] = std::move(samples);
    out["samples_dropped"] = samples_dropped_;
    out["peak"] = describe(peak_);
    json top = json::array();
    for (const Allocation& a : at_peak) top.push_back(describe(a));
    out["top_allocations"] = std::move(top);
    json phases = json::object();
    for (MemoryPhase phase : kPhases) {
      const PhaseTotals& totals = phases_[static_cast<size_t>(phase)];
      phases[memory_phase_name(phase)] = {{"allocations", totals.allocations},
                                          {"allocated_bytes", totals.allocated_bytes},
                                          {"max_live_bytes", totals.max_live_bytes}};
    }
    out["phases"] = std::move(phases);
    out["live_bytes"] = live_bytes_;
    if (failure_) {
      json failure = describe(*failure_);
      failure["live_bytes"] = live_at_failure_;
      out["failed_allocation"] = std::move(failure);
    }

    // What comes between this window and the next step (the end of the
    // step's bookkeeping, a peer's late collective) belongs to the next
    // step's window, not to a step this window already closed.
    ++step_;
    start_window();  // from what is live now
    window_first_step_ = step_;
  }
  return out.dump();
}

}  // namespace titan
