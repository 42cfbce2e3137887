// debug.count_host_reads: every read of a tensor's value by the host during
// training (each `.item()` / host_value, i.e. aten::_local_scalar_dense; on
// CUDA also every device-to-host copy), counted through a global
// RecordFunction callback, with where the first few happened. On a GPU each
// such read drains the device's queue: the step must have none between log
// steps. It counts the same on CPU as on CUDA, except reads through
// `.cpu()` and data_ptr, which dispatch nothing on CPU (they are copies, and
// counted, on CUDA).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

class HostReadCounter {
 public:
  // `cuda`: also watch copies (costs input capture on every op).
  explicit HostReadCounter(bool cuda);
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
