// Comm: one c10d process group (Gloo for CPU tensors, NCCL for CUDA), the
// only path through which Titan issues collectives. Every call is checked
// locally before it reaches the backend (a size mismatch inside Gloo kills
// the process), shown to the CommObservers and bounded by a timeout.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "titan/comm_observer.hpp"

namespace titan {

enum class ReduceOp { sum, avg, max, min };

// A collective in flight; wait() finishes it (and tells the observers).
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void wait() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual const std::string& name() const = 0;  // e.g. "dp_shard", "world"
  virtual int rank() const = 0;                 // rank inside this group
  virtual int size() const = 0;
  virtual const std::vector<int>& global_ranks() const = 0;

  virtual void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  virtual std::unique_ptr<CommWork> all_reduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  // Every rank's `input` (same shape everywhere) stacked along dim 0 into
  // `output` [size * n, ...], which must be contiguous.
  virtual void all_gather_into(at::Tensor& output, const at::Tensor& input) = 0;
  // The same, started now and finished by wait() (FSDP's prefetch): both
  // tensors must stay alive and untouched until then.
  virtual std::unique_ptr<CommWork> all_gather_into_async(at::Tensor& output, const at::Tensor& input) = 0;
  // `input` [size * n, ...] reduced over ranks; this rank's n rows returned.
  virtual at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op = ReduceOp::sum) = 0;
  // The same into `output` [n, ...] (contiguous), started now and finished by
  // wait() (async tensor parallelism overlaps it with the next matmul).
  virtual std::unique_ptr<CommWork> reduce_scatter_into_async(at::Tensor& output, const at::Tensor& input,
                                                              ReduceOp op = ReduceOp::sum) = 0;
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  // Row block r of `input` (dim 0 split in size even parts) goes to rank r;
  // the result holds the blocks received, in rank order.
  virtual at::Tensor all_to_all(const at::Tensor& input) = 0;
  // Uneven blocks: the first send_rows[0] rows of `input` go to rank 0, the
  // next send_rows[1] to rank 1, ...; the result stacks recv_rows[r] rows
  // from each rank r in rank order (each rank's recv_rows[r] is rank r's
  // send_rows for it: exchange the counts first). One entry per rank.
  virtual at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                                  const std::vector<int64_t>& recv_rows) = 0;
  // Point-to-point; send blocks until the peer has received.
  virtual void send(const at::Tensor& tensor, int peer) = 0;
  virtual void recv(at::Tensor& tensor, int peer) = 0;
  // The same, started now and finished by wait(), so a ring exchange (every
  // rank sends to the next and receives from the previous) cannot deadlock
  // and overlaps compute. Messages between two ranks match in the order
  // posted per tag; use distinct tags for streams that may cross. `tensor`
  // must stay alive and untouched until wait() returns.
  virtual std::unique_ptr<CommWork> send_async(const at::Tensor& tensor, int peer, int tag = 0) = 0;
  virtual std::unique_ptr<CommWork> recv_async(at::Tensor& tensor, int peer, int tag = 0) = 0;
  virtual void barrier() = 0;

  at::Tensor all_gather(const at::Tensor& input);  // convenience: new output
};

// What the comm layer tells observers about the caller ("step 12 / fsdp
// all_gather layers.3"): set for a scope, per thread.
class CallSite {
 public:
  // Nested: "outer / text". Whole: `text` replaces the current site for the
  // scope (a backward pass restoring the site its forward saw).
  enum class Mode { nested, whole };
  explicit CallSite(std::string text, Mode mode = Mode::nested);
  ~CallSite();
  CallSite(const CallSite&) = delete;
  CallSite& operator=(const CallSite&) = delete;
  static const std::string& current();

 private:
  std::string previous_;
};

// Observers see every call of every Comm (the flight recorder is one).
void add_comm_observer(CommObserver* observer);
void clear_comm_observers();

}  // namespace titan
