// Collectives on a c10d process group (see compat_collectives.hpp): CPU
// tensors go to its Gloo backend, CUDA tensors to its NCCL backend.
#include "compat_collectives.hpp"

#include <ATen/ATen.h>

#include "titan/error.hpp"

namespace titan::compat {

namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return c10d::ReduceOp::SUM;
    case ReduceOp::avg: return c10d::ReduceOp::AVG;
    case ReduceOp::max: return c10d::ReduceOp::MAX;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

void wait_for(c10d::Work& work, const c10::Device& device, std::chrono::milliseconds timeout, const std::string& what) {
  bool completed = false;
  try {
    completed = device.is_cuda() ? work.wait() : work.wait(timeout);
  } catch (const c10::Error& error) {
    throw Error(what + " failed: " + error.what_without_backtrace() +
                " (a peer rank may have died or timed out; its log has the first error)");
  } catch (const std::exception& error) {
    throw Error(what + " failed: " + error.what() +
                " (a peer rank may have died or timed out; its log has the first error)");
  }
  if (!completed) throw Error(what + " timed out after " + std::to_string(timeout.count()) + " ms");
}

StartedCollective start_all_reduce(c10d::ProcessGroup& group, at::Tensor& tensor, ReduceOp op) {
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  std::vector<at::Tensor> list{buffer};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  StartedCollective started;
  started.device = tensor.device();
  started.works.push_back(group.allreduce(list, options));
  at::Tensor target = tensor;
  started.finish = [buffer, target]() mutable {
    if (!buffer.is_same(target)) target.copy_(buffer);
  };
  return started;
}

StartedCollective start_all_gather_into(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input) {
  StartedCollective started;
  started.device = input.device();
  const int size = group.getSize();
  const int64_t n = input.size(0);
  at::Tensor in = input.contiguous();
  started.finish = [in] {};  // keeps the input alive until the work is done
  if (in.is_cuda()) {
    started.works.push_back(group._allgather_base(output, in));
    return started;
  }
  // Gloo: one broadcast per rank into views of the output, 2.8x faster than
  // its _allgather_base (64 MiB on 2 ranks, LibTorch 2.11; docs/testing.md).
  at::Tensor& out = output;
  const at::Tensor& own = in;
  for (int root = 0; root < size; ++root) {
    at::Tensor slot = out.narrow(0, root * n, n);
    if (root == group.getRank()) slot.copy_(own);
    std::vector<at::Tensor> list{slot};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    started.works.push_back(group.broadcast(list, options));
  }
  return started;
}

at::Tensor reduce_scatter(c10d::ProcessGroup& group, const at::Tensor& input, ReduceOp op,
                          std::chrono::milliseconds timeout, const std::string& what) {
  at::Tensor output = at::empty(input.narrow(0, 0, input.size(0) / group.getSize()).sizes(), input.options());
  StartedCollective started = start_reduce_scatter_into(group, output, input, op);
  for (auto& work : started.works) wait_for(*work, started.device, timeout, what);
  started.finish();
  return output;
}

StartedCollective start_reduce_scatter_into(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input,
                                            ReduceOp op) {
  StartedCollective started;
  started.device = input.device();
  at::Tensor in = input.contiguous();
  c10d::ReduceScatterOptions options;
  options.reduceOp = to_c10d(op);
  started.works.push_back(group._reduce_scatter_base(output, in, options));
  started.finish = [in] {};  // keeps the input alive until the work is done
  return started;
}

void broadcast(c10d::ProcessGroup& group, at::Tensor& tensor, int root, std::chrono::milliseconds timeout,
               const std::string& what) {
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  std::vector<at::Tensor> list{buffer};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  auto work = group.broadcast(list, options);
  wait_for(*work, tensor.device(), timeout, what);
  if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

at::Tensor all_to_all(c10d::ProcessGroup& group, const at::Tensor& input, std::chrono::milliseconds timeout,
                      const std::string& what) {
  at::Tensor in = input.contiguous();
  at::Tensor out = at::empty_like(in);
  std::vector<int64_t> even;  // empty: equal splits
  auto work = group.alltoall_base(out, in, even, even);
  wait_for(*work, in.device(), timeout, what);
  return out;
}

at::Tensor all_to_all_v(c10d::ProcessGroup& group, const at::Tensor& input, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows, std::chrono::milliseconds timeout,
                        const std::string& what) {
  at::Tensor in = input.contiguous();
  int64_t received = 0;
  for (int64_t rows : recv_rows) received += rows;
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = received;
  at::Tensor out = at::empty(shape, in.options());
  // c10d reads the splits as rows of dim 0, like this interface.
  std::vector<int64_t> out_splits = recv_rows, in_splits = send_rows;
  auto work = group.alltoall_base(out, in, out_splits, in_splits);
  wait_for(*work, in.device(), timeout, what);
  return out;
}

void send(c10d::ProcessGroup& group, const at::Tensor& tensor, int peer, std::chrono::milliseconds timeout,
          const std::string& what) {
  StartedCollective started = start_send(group, tensor, peer, 0);
  wait_for(*started.works[0], started.device, timeout, what);
}

void recv(c10d::ProcessGroup& group, at::Tensor& tensor, int peer, std::chrono::milliseconds timeout,
          const std::string& what) {
  StartedCollective started = start_recv(group, tensor, peer, 0);
  wait_for(*started.works[0], started.device, timeout, what);
  started.finish();
}

StartedCollective start_send(c10d::ProcessGroup& group, const at::Tensor& tensor, int peer, int tag) {
  // The contiguous buffer is kept by finish() until the send is waited on.
  at::Tensor buffer = tensor.contiguous();
  std::vector<at::Tensor> list{buffer};
  StartedCollective started;
  started.device = tensor.device();
  started.works.push_back(group.send(list, peer, tag));
  started.finish = [buffer] {};
  return started;
}

StartedCollective start_recv(c10d::ProcessGroup& group, at::Tensor& tensor, int peer, int tag) {
  at::Tensor buffer = tensor.is_contiguous() ? tensor : at::empty_like(tensor, at::MemoryFormat::Contiguous);
  std::vector<at::Tensor> list{buffer};
  StartedCollective started;
  started.device = tensor.device();
  started.works.push_back(group.recv(list, peer, tag));
  at::Tensor target = tensor;
  started.finish = [buffer, target]() mutable {
    if (!buffer.is_same(target)) target.copy_(buffer);
  };
  return started;
}

}  // namespace titan::compat
