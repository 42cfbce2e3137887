// Collectives on a c10d process group, with the comm layer's waits and
// errors. Gloo (LibTorch 2.11) has them all natively, bf16 and AVG too;
// only its all-gather is replaced, by a faster broadcast per rank.
#pragma once
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>

#include "titan/comm.hpp"

// Private to libtitan_core: not exported (titan_core.map exports the
// titan namespace).
#pragma GCC visibility push(hidden)
namespace titan::compat {

// A started collective: wait on every work, then run `finish` (copy back,
// divide for AVG, ...).
struct StartedCollective {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::function<void()> finish;
  c10::Device device = c10::kCPU;  // its tensors' (wait_for)
};

StartedCollective start_all_reduce(c10d::ProcessGroup& group, at::Tensor& tensor, ReduceOp op);
// output: contiguous [size * n, ...]; input [n, ...]
StartedCollective start_all_gather_into(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input);
// The blocking calls wait up to `timeout`; a failure names `what` (the op
// and its group, as the comm layer describes them).
at::Tensor reduce_scatter(c10d::ProcessGroup& group, const at::Tensor& input, ReduceOp op,
                          std::chrono::milliseconds timeout, const std::string& what);
// output: contiguous [n, ...]; input [size * n, ...]; filled by finish().
StartedCollective start_reduce_scatter_into(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input,
                                            ReduceOp op);
void broadcast(c10d::ProcessGroup& group, at::Tensor& tensor, int root, std::chrono::milliseconds timeout,
               const std::string& what);
at::Tensor all_to_all(c10d::ProcessGroup& group, const at::Tensor& input, std::chrono::milliseconds timeout,
                      const std::string& what);
// Rows along dim 0 in per-rank splits (c10d's alltoall_base with split sizes).
at::Tensor all_to_all_v(c10d::ProcessGroup& group, const at::Tensor& input, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows, std::chrono::milliseconds timeout,
                        const std::string& what);
void send(c10d::ProcessGroup& group, const at::Tensor& tensor, int peer, std::chrono::milliseconds timeout,
          const std::string& what);
void recv(c10d::ProcessGroup& group, at::Tensor& tensor, int peer, std::chrono::milliseconds timeout,
          const std::string& what);
// Non-blocking point-to-point; recv's `tensor` is filled by finish().
StartedCollective start_send(c10d::ProcessGroup& group, const at::Tensor& tensor, int peer, int tag);
StartedCollective start_recv(c10d::ProcessGroup& group, at::Tensor& tensor, int peer, int tag);

// Waits for a collective on tensors of `device`, turning a backend failure
// or timeout into a titan::Error. On the host (Gloo) it waits up to
// `timeout`. On a GPU (NCCL) it orders the current stream after the
// collective and returns: given a timeout, NCCL's wait would block the host
// until the GPU has run it, every collective of every step; the process
// group's watchdog enforces the same timeout there (its construction's).
// A barrier, which the host must wait for, passes the CPU.
void wait_for(c10d::Work& work, const c10::Device& device, std::chrono::milliseconds timeout, const std::string& what);

}  // namespace titan::compat
#pragma GCC visibility pop
