// ProcessGroupComm: validates each call locally, tells the observers, and
// runs it through the compat collectives with the group's timeout.
#include "process_group_comm.hpp"

#include <ATen/ATen.h>

#include <atomic>
#include <mutex>
#include <sstream>

#include "compat_collectives.hpp"
#include "test_faults.hpp"
#include "titan/comm_timeout.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

std::mutex observers_mutex;
std::vector<CommObserver*>& observers() {
  static std::vector<CommObserver*> list;
  return list;
}

thread_local std::string current_call_site;
std::atomic<int64_t> job_collective_timeout_ms{0};

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string shape_text(const at::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes() << " " << tensor.scalar_type();
  return out.str();
}

class ProcessGroupComm : public Comm {
 public:
  ProcessGroupComm(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string name, std::vector<int> ranks,
                   std::chrono::milliseconds timeout, std::string peers)
      : group_(std::move(group)), name_(std::move(name)), ranks_(std::move(ranks)), timeout_(timeout),
        peers_(std::move(peers)) {}

  const std::string& name() const override { return name_; }
  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }
  const std::vector<int>& global_ranks() const override { return ranks_; }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override { all_reduce_async(tensor, op)->wait(); }

  std::unique_ptr<CommWork> all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    check_device(tensor, "all_reduce");
    check_average(tensor, op, "all_reduce");
    at::Tensor reduced = tensor;
    switch (take_test_fault("all_reduce")) {
      case test_faults::Action::skip: return std::make_unique<Skipped>();
      case test_faults::Action::grow: reduced = at::cat({tensor.reshape({-1}), at::zeros({1}, tensor.options())}); break;
      case test_faults::Action::reshape: reduced = tensor.unsqueeze(-1); break;
      case test_faults::Action::none: break;
    }
    auto event = begin("all_reduce", {reduced});
    auto started = compat::start_all_reduce(*group_, reduced, op);
    return std::make_unique<Pending>(*this, std::move(started), std::move(event));
  }

  void all_gather_into(at::Tensor& output, const at::Tensor& input) override {
    all_gather_into_async(output, input)->wait();
  }

  std::unique_ptr<CommWork> all_gather_into_async(at::Tensor& output, const at::Tensor& input) override {
    check_device(input, "all_gather");
    if (!output.is_contiguous() || output.dim() != input.dim() || output.dim() == 0 ||
        output.size(0) != input.size(0) * size() || output.sizes().slice(1) != input.sizes().slice(1) ||
        output.scalar_type() != input.scalar_type()) {
      fail("all_gather", "output " + shape_text(output) + " is not a contiguous [" + std::to_string(size()) +
                             " x rows] stack of input " + shape_text(input));
    }
    if (take_test_fault("all_gather") == test_faults::Action::skip) return std::make_unique<Skipped>();
    auto event = begin("all_gather", {input});
    try {
      auto started = compat::start_all_gather_into(*group_, output, input);
      return std::make_unique<Pending>(*this, std::move(started), std::move(event));
    } catch (const c10::Error& error) {
      end(event, false);
      throw Error(what("all_gather") + " failed: " + error.what_without_backtrace());
    }
  }

  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    check_device(input, "reduce_scatter");
    check_average(input, op, "reduce_scatter");
    if (input.dim() == 0 || input.size(0) % size() != 0) {
      fail("reduce_scatter", "input " + shape_text(input) + " has dim 0 not divisible by the group size " +
                                 std::to_string(size()));
    }
    at::Tensor result;
    run("reduce_scatter", {input},
        [&] { result = compat::reduce_scatter(*group_, input, op, timeout_, what("reduce_scatter")); });
    return result;
  }

  std::unique_ptr<CommWork> reduce_scatter_into_async(at::Tensor& output, const at::Tensor& input,
                                                      ReduceOp op) override {
    check_device(input, "reduce_scatter");
    check_average(input, op, "reduce_scatter");
    if (input.dim() == 0 || !output.is_contiguous() || output.dim() != input.dim() ||
        input.size(0) != output.size(0) * size() || output.sizes().slice(1) != input.sizes().slice(1) ||
        output.scalar_type() != input.scalar_type()) {
      fail("reduce_scatter", "input " + shape_text(input) + " is not a [" + std::to_string(size()) +
                                 " x rows] stack of contiguous output " + shape_text(output));
    }
    if (take_test_fault("reduce_scatter") == test_faults::Action::skip) return std::make_unique<Skipped>();
    auto event = begin("reduce_scatter", {input});
    try {
      auto started = compat::start_reduce_scatter_into(*group_, output, input, op);
      return std::make_unique<Pending>(*this, std::move(started), std::move(event));
    } catch (const c10::Error& error) {
      end(event, false);
      throw Error(what("reduce_scatter") + " failed: " + error.what_without_backtrace());
    }
  }

  void broadcast(at::Tensor& tensor, int root) override {
    check_device(tensor, "broadcast");
    check_peer(root, "broadcast");
    run("broadcast", {tensor}, [&] { compat::broadcast(*group_, tensor, root, timeout_, what("broadcast")); });
  }

  at::Tensor all_to_all(const at::Tensor& input) override {
    check_device(input, "all_to_all");
    if (input.dim() == 0 || input.size(0) % size() != 0) {
      fail("all_to_all", "input " + shape_text(input) + " has dim 0 not divisible by the group size " +
                             std::to_string(size()));
    }
    at::Tensor result;
    run("all_to_all", {input}, [&] { result = compat::all_to_all(*group_, input, timeout_, what("all_to_all")); });
    return result;
  }

  at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                          const std::vector<int64_t>& recv_rows) override {
    check_device(input, "all_to_all");
    const auto ranks = static_cast<size_t>(size());
    if (send_rows.size() != ranks || recv_rows.size() != ranks) {
      fail("all_to_all", "split sizes for " + std::to_string(send_rows.size()) + " / " +
                             std::to_string(recv_rows.size()) + " ranks, the group has " + std::to_string(ranks));
    }
    int64_t sent = 0;
    for (int64_t rows : send_rows) sent += rows;
    for (int64_t rows : recv_rows) {
      if (rows < 0) fail("all_to_all", "a negative receive split");
    }
    if (input.dim() == 0 || input.size(0) != sent) {
      fail("all_to_all", "input " + shape_text(input) + " does not have the " + std::to_string(sent) +
                             " rows its send splits add up to");
    }
    at::Tensor result;
    run("all_to_all", {input}, [&] {
      result = compat::all_to_all_v(*group_, input, send_rows, recv_rows, timeout_, what("all_to_all"));
    }, Peer{-1, 0}, Splits{send_rows, recv_rows});
    return result;
  }

  void send(const at::Tensor& tensor, int peer) override {
    check_device(tensor, "send");
    check_peer(peer, "send");
    run("send", {tensor}, [&] { compat::send(*group_, tensor, peer, timeout_, what("send")); }, Peer{peer, 0});
  }

  void recv(at::Tensor& tensor, int peer) override {
    check_device(tensor, "recv");
    check_peer(peer, "recv");
    run("recv", {tensor}, [&] { compat::recv(*group_, tensor, peer, timeout_, what("recv")); }, Peer{peer, 0});
  }

  std::unique_ptr<CommWork> send_async(const at::Tensor& tensor, int peer, int tag) override {
    check_device(tensor, "send");
    check_peer(peer, "send");
    return start_p2p("send", tensor, Peer{peer, tag}, [&] { return compat::start_send(*group_, tensor, peer, tag); });
  }

  std::unique_ptr<CommWork> recv_async(at::Tensor& tensor, int peer, int tag) override {
    check_device(tensor, "recv");
    check_peer(peer, "recv");
    return start_p2p("recv", tensor, Peer{peer, tag}, [&] { return compat::start_recv(*group_, tensor, peer, tag); });
  }

  void barrier() override {
    run("barrier", {}, [&] {
      auto work = group_->barrier();
      compat::wait_for(*work, c10::kCPU, timeout_, what("barrier"));  // the host waits: a barrier
    });
  }

 private:
  // The other end of a send/recv (a rank of this group) and its tag, for the observers.
  struct Peer {
    int group_rank;  // -1: not a point-to-point op
    int tag;
  };
  // An uneven all-to-all's rows to and from each member, for the observers.
  struct Splits {
    std::vector<int64_t> send_rows, recv_rows;
  };

  // TEST-ONLY (TITAN_TEST_FAULT): a call the faulty rank never issued.
  class Skipped : public CommWork {
   public:
    void wait() override {}
  };

  test_faults::Action take_test_fault(const std::string& op) {
    return test_faults::take(op, name_, ranks_[static_cast<size_t>(rank())], sequence_);
  }

  class Pending : public CommWork {
   public:
    Pending(ProcessGroupComm& comm, compat::StartedCollective started, CollectiveEvent event)
        : comm_(comm), started_(std::move(started)), event_(std::move(event)) {}
    ~Pending() override {
      if (!done_) {
        try {
          wait();
        } catch (...) {  // a destructor must not throw; the error was logged by wait's caller path
        }
      }
    }
    void wait() override {
      if (done_) return;
      done_ = true;
      try {
        for (auto& work : started_.works) compat::wait_for(*work, started_.device, comm_.timeout_, comm_.what(event_.op));
        started_.finish();
      } catch (const Error& error) {
        comm_.end(event_, false);
        throw Error(error.what() + comm_.peers_note());
      } catch (const c10::Error& error) {
        comm_.end(event_, false);
        throw Error(comm_.what(event_.op) + " failed: " + error.what_without_backtrace() + comm_.peers_note());
      } catch (const std::exception& error) {
        comm_.end(event_, false);
        throw Error(comm_.what(event_.op) + " failed: " + error.what() + comm_.peers_note());
      }
      comm_.end(event_, true);
    }

   private:
    ProcessGroupComm& comm_;
    compat::StartedCollective started_;
    CollectiveEvent event_;
    bool done_ = false;
  };

  template <typename Start>
  std::unique_ptr<CommWork> start_p2p(const std::string& op, const at::Tensor& tensor, Peer peer, Start start) {
    if (take_test_fault(op) == test_faults::Action::skip) return std::make_unique<Skipped>();
    auto event = begin(op, {tensor}, peer);
    try {
      return std::make_unique<Pending>(*this, start(), std::move(event));
    } catch (const c10::Error& error) {
      end(event, false);
      throw Error(what(op) + " failed: " + error.what_without_backtrace());
    }
  }

  std::string peers_note() const { return peers_.empty() ? "" : "; the group's other ranks: " + peers_; }

  std::string what(const std::string& op) const {
    return op + " on group '" + name_ + "' (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")";
  }

  [[noreturn]] void fail(const std::string& op, const std::string& problem) const {
    throw Error(what(op) + ": " + problem);
  }

  void check_device(const at::Tensor& tensor, const std::string& op) const {
    if (!tensor.defined()) fail(op, "undefined tensor");
    // CPU tensors always go through Gloo; CUDA tensors need the NCCL backend.
    if (tensor.is_cuda() && group_->getBackendName() != "nccl") {
      fail(op, "a CUDA tensor on a group without an NCCL backend; set training.device: cuda so that the "
               "groups get one, or keep the tensor on the CPU");
    }
  }

  void check_average(const at::Tensor& tensor, ReduceOp op, const std::string& name) const {
    if (op == ReduceOp::avg && !at::isFloatingType(tensor.scalar_type())) {
      fail(name, "average of a " + std::string(c10::toString(tensor.scalar_type())) +
                     " tensor; use sum and divide, or a floating-point dtype");
    }
  }

  void check_peer(int peer, const std::string& op) const {
    if (peer < 0 || peer >= size()) fail(op, "peer rank " + std::to_string(peer) + " is outside the group");
  }

  CollectiveEvent begin(const std::string& op, const std::vector<at::Tensor>& tensors, Peer peer = Peer{-1, 0},
                        Splits splits = {}) {
    CollectiveEvent event;
    event.send_rows = std::move(splits.send_rows);
    event.recv_rows = std::move(splits.recv_rows);
    event.sequence = sequence_++;
    event.op = op;
    event.group = name_;
    event.group_ranks = ranks_;
    if (peer.group_rank >= 0) {
      const auto index = static_cast<size_t>(peer.group_rank);
      event.peer = index < ranks_.size() ? ranks_[index] : peer.group_rank;
      event.tag = peer.tag;
    }
    for (const auto& tensor : tensors) {
      event.shapes.push_back(tensor.sizes().vec());
      event.dtype = c10::toString(tensor.scalar_type());
      event.bytes += static_cast<int64_t>(tensor.numel() * tensor.element_size());
    }
    event.call_site = current_call_site;
    event.time_s = monotonic_seconds();
    std::lock_guard<std::mutex> lock(observers_mutex);
    for (auto* observer : observers()) observer->on_enqueue(event);
    for (auto* observer : observers()) observer->on_start(event);
    return event;
  }

  void end(CollectiveEvent& event, bool ok) {
    event.time_s = monotonic_seconds();
    std::lock_guard<std::mutex> lock(observers_mutex);
    for (auto* observer : observers()) observer->on_complete(event, ok);
  }

  template <typename Body>
  void run(const std::string& op, const std::vector<at::Tensor>& tensors, Body body, Peer peer = Peer{-1, 0},
           Splits splits = {}) {
    if (take_test_fault(op) == test_faults::Action::skip) return;
    auto event = begin(op, tensors, peer, std::move(splits));
    try {
      body();
    } catch (const Error& error) {  // a failed wait: it names the op and the group already
      end(event, false);
      throw Error(error.what() + peers_note());
    } catch (const c10::Error& error) {
      end(event, false);
      throw Error(what(op) + " failed: " + error.what_without_backtrace() + peers_note());
    } catch (const std::exception& error) {
      end(event, false);
      throw Error(what(op) + " failed: " + error.what() + peers_note());
    }
    end(event, true);
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::string name_;
  std::vector<int> ranks_;
  std::chrono::milliseconds timeout_;
  std::string peers_;  // the other members and their interfaces, for failures
  uint64_t sequence_ = 0;
};

}  // namespace

at::Tensor Comm::all_gather(const at::Tensor& input) {
  std::vector<int64_t> shape = input.sizes().vec();
  if (shape.empty()) throw Error("all_gather on group '" + name() + "': a 0-dim tensor has no rows to stack");
  shape[0] *= size();
  at::Tensor output = at::empty(shape, input.options());
  all_gather_into(output, input);
  return output;
}

// Nested scopes add detail to the outer one ("step 12" / "fsdp all_gather
// layers.3"), so the observers see the phase and the module together.
CallSite::CallSite(std::string text, Mode mode) : previous_(current_call_site) {
  current_call_site = previous_.empty() || mode == Mode::whole ? std::move(text) : previous_ + " / " + text;
}
CallSite::~CallSite() { current_call_site = previous_; }
const std::string& CallSite::current() { return current_call_site; }

void add_comm_observer(CommObserver* observer) {
  std::lock_guard<std::mutex> lock(observers_mutex);
  observers().push_back(observer);
}

std::chrono::milliseconds collective_timeout() { return std::chrono::milliseconds(job_collective_timeout_ms.load()); }

void clear_comm_observers() {
  std::lock_guard<std::mutex> lock(observers_mutex);
  observers().clear();
}

std::unique_ptr<Comm> internal::make_process_group_comm(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string name,
                                              std::vector<int> global_ranks, std::chrono::milliseconds timeout,
                                              std::string peers) {
  test_faults::check_environment();
  job_collective_timeout_ms.store(timeout.count());
  return std::make_unique<ProcessGroupComm>(std::move(group), std::move(name), std::move(global_ranks), timeout,
                                            std::move(peers));
}

}  // namespace titan
