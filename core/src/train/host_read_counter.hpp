// debug.count_host_reads: every read of a tensor's value by the host during
// training (each `.item()` / host_value, i.e. aten::_local_scalar_dense) and,
// where the run's tensors live on a device (CUDA, or meta in tests), every
// copy that makes the host wait for it: a copy to the host, and a copy from
// the host without non_blocking (ATen synchronizes the stream after it).
// Ops whose CUDA kernels read values to the host themselves (nonzero,
// masked_select, bincount, unique, repeat_interleave without an output
// size) count on every device, the CPU included. Counted through a global
// RecordFunction callback, with where the first few happened. On a GPU each
// of them drains the device's queue: the step must have none between log
// steps. On the CPU the copies are not seen: there `.cpu()`, `.to(device)`
// and data_ptr dispatch nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace at {
class RecordFunction;
}

namespace titan {

// Whether the op `fn` makes the host wait for the device: a read of a value
// (aten::_local_scalar_dense), an op that reads values inside its CUDA
// kernel, or with `on_device` (the run's tensors are on a device) a copy to
// the host or a blocking copy from it. Needs the op's inputs
// (RecordFunctionCallback::needsInputs) for the copies and repeat_interleave.
bool makes_host_wait(const at::RecordFunction& fn, bool on_device);
// "aten::copy_ at 'step 4' from titan::microbatch_of(...) <- ...": the op,
// the call site and the innermost Titan frames.
std::string host_wait_site(const at::RecordFunction& fn);

class HostReadCounter {
 public:
  // `on_device`: also watch copies. Every op's inputs are captured (a debug
  // setting's cost).
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
