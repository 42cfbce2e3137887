// debug.count_host_reads: every read of a tensor's value by the host during
// training (each `.item()` / host_value, i.e. aten::_local_scalar_dense) and,
// where the run's tensors live on a device (CUDA, or meta in tests), every
// copy that makes the host wait for it: a copy to the host, and a copy from
// the host without non_blocking (ATen synchronizes the stream after it).
// Counted through a global RecordFunction callback, with where the first few
// happened. On a GPU each of them drains the device's queue: the step must
// have none between log steps. On the CPU the copies are not seen: there
// `.cpu()`, `.to(device)` and data_ptr dispatch nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

class HostReadCounter {
 public:
  // `on_device`: also watch copies (costs input capture on every op).
  explicit HostReadCounter(bool on_device);
  ~HostReadCounter();
  HostReadCounter(const HostReadCounter&) = delete;
  HostReadCounter& operator=(const HostReadCounter&) = delete;

  struct Reads {
    int64_t count = 0;
    std::vector<std::string> sites;  // the first few: "aten::_local_scalar_dense at 'step 3 / ...' from titan::..."
  };
  // The reads since the last take().
  Reads take();

 private:
  uint64_t handle_ = 0;
};

}  // namespace titan
