// Memory metrics: the CUDA caching allocator's statistics, or on CPU
// LibTorch's allocator (active) and the process's resident set (reserved).
#include "memory_metrics.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "titan/compat.hpp"

namespace titan {

namespace {

constexpr double kGiB = double(1ull << 30);

// A "Key:   123 kB" line of a /proc file, in bytes; 0 when absent.
int64_t proc_kib_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

// RAM, or the memory limit of this process's cgroup (v2) when lower: a
// container's share is what a run can fill.
int64_t cpu_capacity_bytes() {
  int64_t capacity = proc_kib_field("/proc/meminfo", "MemTotal");
  std::ifstream limit("/sys/fs/cgroup/memory.max");
  std::string value;
  if (limit >> value && value != "max") {
    try {
      capacity = std::min(capacity, static_cast<int64_t>(std::stoll(value)));
    } catch (const std::exception&) {
    }
  }
  return capacity;
}

}  // namespace

int64_t peak_resident_bytes() { return proc_kib_field("/proc/self/status", "VmHWM"); }

bool reset_peak_resident_bytes() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // 5: reset the peak resident set (proc(5))
  clear.flush();
  return static_cast<bool>(clear);
}

MemoryMetrics::MemoryMetrics(const c10::Device& device)
    : device_(device),
      capacity_bytes_(device.is_cuda() ? compat::device_memory_stats(device).capacity : cpu_capacity_bytes()) {
  if (!device.is_cuda()) cpu_active_ = std::make_unique<CpuMemoryTracker>();
}

MemoryMetrics::~MemoryMetrics() = default;

MemorySample MemoryMetrics::take() {
  int64_t active = 0, reserved = 0;
  MemorySample sample;
  if (device_.is_cuda()) {
    const compat::DeviceMemoryStats stats = compat::device_memory_stats(device_);
    active = stats.peak_active;
    reserved = stats.peak_reserved;
    sample.alloc_retries = stats.alloc_retries;
    sample.ooms = stats.ooms;
    compat::reset_device_peak_memory(device_);
  } else {
    active = cpu_active_->take_peak();
    reserved = peak_resident_bytes();
    reset_peak_resident_bytes();
  }
  const double capacity = capacity_bytes_ > 0 ? double(capacity_bytes_) : std::numeric_limits<double>::infinity();
  sample.max_active_gib = active / kGiB;
  sample.max_active_pct = 100.0 * active / capacity;
  sample.max_reserved_gib = reserved / kGiB;
  sample.max_reserved_pct = 100.0 * reserved / capacity;
  return sample;
}

}  // namespace titan
