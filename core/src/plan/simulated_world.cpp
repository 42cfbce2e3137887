// SimulatedWorld: rounds (one per collective of a group, all members'
// parts), mailboxes (one per sender, receiver and tag), and the checks that
// make a mismatch an error before launch instead of a hang after it.
#include "simulated_world.hpp"

#include <ATen/ATen.h>

#include <condition_variable>
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include "model/tensor_bytes.hpp"

namespace titan {

namespace {

std::string shape_text(const at::Tensor& tensor) {
  if (!tensor.defined()) return "(none)";
  std::ostringstream out;
  out << tensor.sizes() << " " << tensor.scalar_type();
  return out.str();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 10) return text + ", ... " + std::to_string(ranks.back());
    text += (i ? "," : "") + std::to_string(ranks[i]);
  }
  return text;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

// The shape of `tensor` with dim 0 replaced.
std::vector<int64_t> with_rows(const at::Tensor& tensor, int64_t rows) {
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] = rows;
  return shape;
}

}  // namespace

namespace {

// One member's part of a collective.
struct Part {
  std::string op;  // as the flight recorder names it
  std::string site;
  ReduceOp reduce = ReduceOp::sum;
  int root = -1;
  at::Tensor input;
  std::vector<int64_t> send_rows, recv_rows;
};

struct Round {
  std::vector<Part> parts;
  int count = 0;
  int collected = 0;
  bool complete = false;
  std::vector<at::Tensor> results;  // per member, CPU parts only
  std::condition_variable done;
};

struct Group {
  std::string name, label;
  std::vector<int> ranks;
  // Per member: the member whose calls it makes (itself when simulated).
  std::vector<size_t> stand_in;
  int present = 0;  // simulated members
  std::vector<int64_t> next;  // per member: its next collective's number
  std::map<int64_t, std::unique_ptr<Round>> rounds;
};

struct Message {
  at::Tensor tensor;  // CPU: a copy of the data; meta: the shape
  std::string site;
  bool received = false;
};

struct Mailbox {
  std::deque<std::shared_ptr<Message>> messages;
  std::condition_variable changed;
  std::string from_to;  // "rank 3 -> rank 4, tag 0, group pp/..."
};

}  // namespace

struct SimulatedWorld::State {
  std::mutex mutex;
  std::mutex turn;  // held by the one rank thread that runs
  bool take_turns = false;
  int live = 0;
  struct Wait {
    std::condition_variable* cv;
    std::string what;
    std::function<bool()> ready;  // woken but not yet running counts as running
  };
  std::map<int, Wait> waiting;  // rank -> its wait
  std::string failure;
  std::map<std::string, std::shared_ptr<Group>> groups;
  std::map<std::string, int> instances;  // per name+ranks and rank, as each DistRuntime counts them
  std::map<std::string, std::shared_ptr<Mailbox>> mailboxes;

  // Waits on `cv` until `ready()`; when every live rank waits, the job is
  // deadlocked and stops with a description of each rank's wait.
  template <class Ready>
  void block(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, const Ready& ready, int rank,
             const std::string& waiting_for);
  void stop_locked(const std::string& reason);
  std::string describe_waits() const;
  // Every live rank waits, and none of the waits can end.
  bool deadlocked() const;
};

void SimulatedWorld::State::stop_locked(const std::string& reason) {
  if (failure.empty()) failure = reason;
  for (auto& [rank, wait] : waiting) wait.cv->notify_all();
}

std::string SimulatedWorld::State::describe_waits() const {
  std::string waits;
  int shown = 0;
  for (const auto& [waiter, wait] : waiting) {
    if (++shown > 16) return waits + "\n  ... and " + std::to_string(waiting.size() - 16) + " more ranks";
    waits += "\n  rank " + std::to_string(waiter) + " waits: " + wait.what;
  }
  return waits;
}

bool SimulatedWorld::State::deadlocked() const {
  if (static_cast<int>(waiting.size()) != live) return false;
  for (const auto& [rank, wait] : waiting) {
    if (wait.ready()) return false;
  }
  return true;
}

template <class Ready>
void SimulatedWorld::State::block(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, const Ready& ready,
                                  int rank, const std::string& waiting_for) {
  if (ready()) return;
  if (!failure.empty()) throw SimulationStopped(failure);
  waiting[rank] = {&cv, waiting_for, ready};
  if (deadlocked()) {
    stop_locked("deadlock: every rank waits and none can go on (a collective or send that some rank never issues);" +
                describe_waits());
  }
  while (!ready() && failure.empty()) {
    if (!take_turns) {
      cv.wait(lock);
      continue;
    }
    turn.unlock();  // another rank runs while this one waits
    cv.wait(lock);
    lock.unlock();  // the turn first, then the state (the order every thread takes them in)
    turn.lock();
    lock.lock();
  }
  waiting.erase(rank);
  if (!ready()) throw SimulationStopped(failure);
}

namespace {

// Whether the members' parts are the same collective; the first difference
// otherwise, described.
std::string first_difference(const std::vector<Part>& parts, const std::vector<int>& ranks) {
  const Part& first = parts[0];
  auto who = [&](size_t member) {
    const Part& part = parts[member];
    return "rank " + std::to_string(ranks[member]) + " issued " + part.op + " " + shape_text(part.input) +
           (part.op == "all_reduce" || part.op == "reduce_scatter" ? std::string(" (") + op_name(part.reduce) + ")"
                                                                     : "") +
           (part.root >= 0 ? " root " + std::to_string(part.root) : "") + " at '" + part.site + "'";
  };
  for (size_t member = 1; member < parts.size(); ++member) {
    const Part& part = parts[member];
    bool same = part.op == first.op && part.reduce == first.reduce && part.root == first.root &&
                part.input.defined() == first.input.defined();
    if (same && part.input.defined()) {
      same = part.input.scalar_type() == first.input.scalar_type() &&
             part.input.device().type() == first.input.device().type();
      if (same && part.op == "all_to_all" && !part.send_rows.empty()) {
        same = part.input.sizes().slice(1) == first.input.sizes().slice(1);
      } else if (same) {
        same = part.input.sizes() == first.input.sizes();
      }
    }
    if (!same) return who(member) + " where " + who(0);
  }
  if (first.op == "all_to_all" && !first.send_rows.empty()) {
    for (size_t from = 0; from < parts.size(); ++from) {
      for (size_t to = 0; to < parts.size(); ++to) {
        if (parts[from].send_rows[to] == parts[to].recv_rows[from]) continue;
        return "rank " + std::to_string(ranks[from]) + " sends " + std::to_string(parts[from].send_rows[to]) +
               " rows to rank " + std::to_string(ranks[to]) + ", which expects " +
               std::to_string(parts[to].recv_rows[from]) + " (at '" + parts[from].site + "')";
      }
    }
  }
  return "";
}

// The members' results of a collective on CPU tensors (real data), or
// none for meta tensors (shapes only: each member makes its own).
std::vector<at::Tensor> cpu_results(const std::vector<Part>& parts) {
  const Part& first = parts[0];
  if (!first.input.defined() || !first.input.device().is_cpu()) return {};
  const auto size = static_cast<int64_t>(parts.size());
  std::vector<at::Tensor> inputs;
  for (const Part& part : parts) inputs.push_back(part.input);
  std::vector<at::Tensor> results(parts.size());
  auto reduced = [&] {
    at::Tensor stacked = at::stack(inputs);
    switch (first.reduce) {
      case ReduceOp::sum: return stacked.sum(0);
      case ReduceOp::avg: return stacked.mean(0);
      case ReduceOp::max: return std::get<0>(stacked.max(0));
      case ReduceOp::min: return std::get<0>(stacked.min(0));
    }
    return stacked.sum(0);
  };
  if (first.op == "all_reduce") {
    at::Tensor total = reduced();
    for (auto& result : results) result = total;
  } else if (first.op == "broadcast") {
    for (auto& result : results) result = inputs[static_cast<size_t>(first.root)].clone();
  } else if (first.op == "all_gather") {
    at::Tensor gathered = at::cat(inputs);
    for (auto& result : results) result = gathered;
  } else if (first.op == "reduce_scatter") {
    std::vector<at::Tensor> chunks = reduced().chunk(size);
    for (int64_t member = 0; member < size; ++member) results[member] = chunks[member].clone();
  } else if (first.op == "all_to_all") {
    for (int64_t to = 0; to < size; ++to) {
      std::vector<at::Tensor> blocks;
      for (int64_t from = 0; from < size; ++from) {
        const Part& part = parts[from];
        if (part.send_rows.empty()) {
          blocks.push_back(part.input.chunk(size)[to]);
        } else {
          int64_t offset = 0;
          for (int64_t r = 0; r < to; ++r) offset += part.send_rows[r];
          blocks.push_back(part.input.narrow(0, offset, part.send_rows[to]));
        }
      }
      results[to] = at::cat(blocks);
    }
  }
  return results;
}

}  // namespace

namespace {

class SimulatedComm : public Comm {
 public:
  SimulatedComm(SimulatedWorld::State& world, std::shared_ptr<Group> group, int member,
                std::vector<CollectiveEvent>* events)
      : world_(world), group_(std::move(group)), member_(member), events_(events) {}

  const std::string& name() const override { return group_->name; }
  int rank() const override { return member_; }
  int size() const override { return static_cast<int>(group_->ranks.size()); }
  const std::vector<int>& global_ranks() const override { return group_->ranks; }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override { all_reduce_async(tensor, op)->wait(); }
  std::unique_ptr<CommWork> all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    Part part{"all_reduce", CallSite::current(), op, -1, tensor, {}, {}};
    return post(std::move(part), [&tensor](const at::Tensor& result) {
      if (result.defined()) tensor.copy_(result);
    });
  }
  void all_gather_into(at::Tensor& output, const at::Tensor& input) override {
    all_gather_into_async(output, input)->wait();
  }
  std::unique_ptr<CommWork> all_gather_into_async(at::Tensor& output, const at::Tensor& input) override {
    if (!output.is_contiguous() || output.dim() != input.dim() || output.dim() == 0 ||
        output.size(0) != input.size(0) * size() || output.scalar_type() != input.scalar_type()) {
      fail("all_gather", "output " + shape_text(output) + " is not a contiguous [" + std::to_string(size()) +
                             " x rows] stack of input " + shape_text(input));
    }
    Part part{"all_gather", CallSite::current(), ReduceOp::sum, -1, input, {}, {}};
    return post(std::move(part), [&output](const at::Tensor& result) {
      if (result.defined()) output.copy_(result);
    });
  }
  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    check_rows(input, "reduce_scatter");
    at::Tensor output;
    Part part{"reduce_scatter", CallSite::current(), op, -1, input, {}, {}};
    post(std::move(part), [&](const at::Tensor& result) {
      output = result.defined() ? result : at::empty(with_rows(input, input.size(0) / size()), input.options());
    })->wait();
    return output;
  }
  std::unique_ptr<CommWork> reduce_scatter_into_async(at::Tensor& output, const at::Tensor& input,
                                                      ReduceOp op) override {
    check_rows(input, "reduce_scatter");
    Part part{"reduce_scatter", CallSite::current(), op, -1, input, {}, {}};
    return post(std::move(part), [&output](const at::Tensor& result) {
      if (result.defined()) output.copy_(result);
    });
  }
  void broadcast(at::Tensor& tensor, int root) override {
    if (root < 0 || root >= size()) fail("broadcast", "root " + std::to_string(root) + " is outside the group");
    Part part{"broadcast", CallSite::current(), ReduceOp::sum, root, tensor, {}, {}};
    post(std::move(part), [&tensor](const at::Tensor& result) {
      if (result.defined()) tensor.copy_(result);
    })->wait();
  }
  at::Tensor all_to_all(const at::Tensor& input) override {
    check_rows(input, "all_to_all");
    at::Tensor output;
    Part part{"all_to_all", CallSite::current(), ReduceOp::sum, -1, input, {}, {}};
    post(std::move(part), [&](const at::Tensor& result) {
      output = result.defined() ? result : at::empty_like(input);
    })->wait();
    return output;
  }
  at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                          const std::vector<int64_t>& recv_rows) override {
    const auto members = static_cast<size_t>(size());
    if (send_rows.size() != members || recv_rows.size() != members) {
      fail("all_to_all", "split sizes for " + std::to_string(send_rows.size()) + " / " +
                             std::to_string(recv_rows.size()) + " ranks, the group has " + std::to_string(members));
    }
    int64_t sent = 0, received = 0;
    for (int64_t rows : send_rows) sent += rows;
    for (int64_t rows : recv_rows) received += rows;
    if (input.dim() == 0 || input.size(0) != sent) {
      fail("all_to_all", "input " + shape_text(input) + " does not have the " + std::to_string(sent) +
                             " rows its send splits add up to");
    }
    at::Tensor output;
    Part part{"all_to_all", CallSite::current(), ReduceOp::sum, -1, input, send_rows, recv_rows};
    post(std::move(part), [&](const at::Tensor& result) {
      output = result.defined() ? result : at::empty(with_rows(input, received), input.options());
    })->wait();
    return output;
  }
  void barrier() override {
    post(Part{"barrier", CallSite::current(), ReduceOp::sum, -1, at::Tensor(), {}, {}}, [](const at::Tensor&) {})
        ->wait();
  }

  // A blocking send returns once its message was received; an async one is
  // buffered, as Gloo and NCCL complete a send once the transport has it
  // (a message never received is reported when the step ends).
  void send(const at::Tensor& tensor, int peer) override { post_send(tensor, peer, 0, true)->wait(); }
  void recv(at::Tensor& tensor, int peer) override { recv_async(tensor, peer, 0)->wait(); }
  std::unique_ptr<CommWork> send_async(const at::Tensor& tensor, int peer, int tag) override {
    return post_send(tensor, peer, tag, false);
  }
  std::unique_ptr<CommWork> post_send(const at::Tensor& tensor, int peer, int tag, bool until_received);
  std::unique_ptr<CommWork> recv_async(at::Tensor& tensor, int peer, int tag) override;

 private:
  using Finish = std::function<void(const at::Tensor& result)>;
  class Done;
  class RoundWork;
  class MessageWork;

  std::unique_ptr<CommWork> post(Part part, Finish finish);
  void record(const std::string& op, const at::Tensor& tensor, int peer = -1, int tag = 0) {
    CollectiveEvent event;
    event.sequence = sequence_++;
    event.op = op;
    event.group = group_->name;
    event.group_ranks = group_->ranks;
    if (tensor.defined()) {
      event.shapes.push_back(tensor.sizes().vec());
      event.dtype = c10::toString(tensor.scalar_type());
      event.bytes = tensor_bytes(tensor);
    }
    event.call_site = CallSite::current();
    event.peer = peer;
    event.tag = tag;
    if (events_) events_->push_back(std::move(event));
  }
  void check_rows(const at::Tensor& input, const std::string& op) const {
    if (input.dim() == 0 || input.size(0) % size() != 0) {
      fail(op, "input " + shape_text(input) + " has dim 0 not divisible by the group size " + std::to_string(size()));
    }
  }
  [[noreturn]] void fail(const std::string& op, const std::string& why) const {
    throw Error(op + " on group '" + group_->label + "' (rank " + std::to_string(group_->ranks[member_]) +
                "): " + why + " at '" + CallSite::current() + "'");
  }
  std::shared_ptr<Mailbox> mailbox(int from, int to, int tag);

  SimulatedWorld::State& world_;
  std::shared_ptr<Group> group_;
  const int member_;
  std::vector<CollectiveEvent>* events_;
  uint64_t sequence_ = 0;
};

class SimulatedComm::Done : public CommWork {
 public:
  void wait() override {}
};

class SimulatedComm::RoundWork : public CommWork {
 public:
  RoundWork(SimulatedComm& comm, int64_t number, Finish finish)
      : comm_(comm), number_(number), finish_(std::move(finish)) {}
  ~RoundWork() override {
    if (!waited_) {
      try {
        wait();
      } catch (...) {  // the job stopped: the rank's own error is already on its way up
      }
    }
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    SimulatedWorld::State& world = comm_.world_;
    auto& group = *comm_.group_;
    std::unique_lock<std::mutex> lock(world.mutex);
    Round& round = *group.rounds.at(number_);
    const Part& mine = round.parts[static_cast<size_t>(comm_.member_)];
    world.block(lock, round.done, [&] { return round.complete; }, group.ranks[comm_.member_],
                mine.op + " #" + std::to_string(number_) + " on " + group.label + " at '" + mine.site + "'");
    at::Tensor result = round.results.empty() ? at::Tensor() : round.results[static_cast<size_t>(comm_.member_)];
    if (++round.collected == group.present) group.rounds.erase(number_);
    lock.unlock();
    finish_(result);
  }

 private:
  SimulatedComm& comm_;
  const int64_t number_;
  Finish finish_;
  bool waited_ = false;
};

std::unique_ptr<CommWork> SimulatedComm::post(Part part, Finish finish) {
  record(part.op, part.input);
  auto& group = *group_;
  const auto member = static_cast<size_t>(member_);
  std::unique_lock<std::mutex> lock(world_.mutex);
  if (!world_.failure.empty()) throw SimulationStopped(world_.failure);
  const int64_t number = group.next[member]++;
  std::unique_ptr<Round>& slot = group.rounds[number];
  if (!slot) {
    slot = std::make_unique<Round>();
    slot->parts.resize(group.ranks.size());
  }
  Round& round = *slot;
  round.parts[member] = std::move(part);
  if (++round.count == group.present) {
    for (size_t m = 0; m < group.ranks.size(); ++m) {
      if (group.stand_in[m] != m) round.parts[m] = round.parts[group.stand_in[m]];
    }
    const std::string difference = first_difference(round.parts, group.ranks);
    if (!difference.empty()) {
      world_.stop_locked("group " + group.label + " (ranks " + ranks_text(group.ranks) + "), collective #" +
                         std::to_string(number) + " differs: " + difference);
      throw SimulationStopped(world_.failure);
    }
    round.results = cpu_results(round.parts);
    // A backend lets go of the inputs when the collective completes; held
    // longer, their bytes would count on their ranks until the last
    // member's wait.
    for (Part& done : round.parts) done.input = at::Tensor();
    round.complete = true;
    round.done.notify_all();
  }
  return std::make_unique<RoundWork>(*this, number, std::move(finish));
}

std::shared_ptr<Mailbox> SimulatedComm::mailbox(int from, int to, int tag) {
  // Called with the world's lock held.
  auto& group = *group_;
  const std::string key = group.label + "|" + std::to_string(from) + ">" + std::to_string(to) + "#" + std::to_string(tag);
  auto [it, inserted] = world_.mailboxes.try_emplace(key);
  if (inserted) {
    it->second = std::make_shared<Mailbox>();
    it->second->from_to = "rank " + std::to_string(group.ranks[from]) + " -> rank " +
                          std::to_string(group.ranks[to]) + " (tag " + std::to_string(tag) + ", group " +
                          group.label + ")";
  }
  return it->second;
}

class SimulatedComm::MessageWork : public CommWork {
 public:
  MessageWork(SimulatedWorld::State& world, std::shared_ptr<Mailbox> box, std::shared_ptr<Message> sent,
              at::Tensor* into, int rank, std::string site)
      : world_(world), box_(std::move(box)), sent_(std::move(sent)), into_(into), rank_(rank), site_(std::move(site)) {}
  ~MessageWork() override {
    if (!waited_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    std::unique_lock<std::mutex> lock(world_.mutex);
    Mailbox& box = *box_;
    if (sent_) {  // a send ends when its message was received
      world_.block(lock, box.changed, [&] { return sent_->received; }, rank_,
                   "send " + box.from_to + " at '" + site_ + "'");
      return;
    }
    world_.block(lock, box.changed, [&] { return !box.messages.empty(); }, rank_,
                 "recv " + box.from_to + " at '" + site_ + "'");
    std::shared_ptr<Message> message = box.messages.front();
    box.messages.pop_front();
    if (message->tensor.sizes() != into_->sizes() || message->tensor.scalar_type() != into_->scalar_type()) {
      world_.stop_locked("point-to-point " + box.from_to + ": the receiver expects " + shape_text(*into_) + " at '" +
                         site_ + "', the sender sent " + shape_text(message->tensor) + " at '" + message->site + "'");
      throw SimulationStopped(world_.failure);
    }
    message->received = true;
    box.changed.notify_all();
    lock.unlock();
    if (into_->device().is_cpu() && message->tensor.device().is_cpu()) into_->copy_(message->tensor);
  }

 private:
  SimulatedWorld::State& world_;
  std::shared_ptr<Mailbox> box_;
  std::shared_ptr<Message> sent_;  // set for a send
  at::Tensor* into_;               // set for a recv
  const int rank_;
  const std::string site_;
  bool waited_ = false;
};

std::unique_ptr<CommWork> SimulatedComm::post_send(const at::Tensor& tensor, int peer, int tag, bool until_received) {
  if (peer < 0 || peer >= size()) fail("send", "peer rank " + std::to_string(peer) + " is outside the group");
  record("send", tensor, group_->ranks[peer], tag);
  auto message = std::make_shared<Message>();
  message->tensor = tensor.device().is_cpu() ? tensor.clone() : tensor;
  message->site = CallSite::current();
  std::unique_lock<std::mutex> lock(world_.mutex);
  if (!world_.failure.empty()) throw SimulationStopped(world_.failure);
  auto box = mailbox(member_, peer, tag);
  box->messages.push_back(message);
  box->changed.notify_all();
  if (!until_received) return std::make_unique<Done>();
  return std::make_unique<MessageWork>(world_, box, message, nullptr, group_->ranks[member_], message->site);
}

std::unique_ptr<CommWork> SimulatedComm::recv_async(at::Tensor& tensor, int peer, int tag) {
  if (peer < 0 || peer >= size()) fail("recv", "peer rank " + std::to_string(peer) + " is outside the group");
  record("recv", tensor, group_->ranks[peer], tag);
  std::unique_lock<std::mutex> lock(world_.mutex);
  if (!world_.failure.empty()) throw SimulationStopped(world_.failure);
  auto box = mailbox(peer, member_, tag);
  return std::make_unique<MessageWork>(world_, box, nullptr, &tensor, group_->ranks[member_], CallSite::current());
}

}  // namespace

SimulatedWorld::SimulatedWorld(int world_size, std::vector<int> representative, bool take_turns)
    : world_size_(world_size), representative_(std::move(representative)), state_(std::make_unique<State>()) {
  state_->take_turns = take_turns;
  if (representative_.empty()) {
    for (int rank = 0; rank < world_size; ++rank) representative_.push_back(rank);
  }
}
SimulatedWorld::~SimulatedWorld() = default;

std::unique_ptr<Comm> SimulatedWorld::new_group(const std::string& name, const std::vector<int>& ranks, int rank,
                                                std::vector<CollectiveEvent>* events) {
  int member = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) member = static_cast<int>(i);
  }
  if (member < 0) throw Error("process group '" + name + "' does not contain rank " + std::to_string(rank));
  std::string key = name + "/ranks";
  for (int r : ranks) key += "_" + std::to_string(r);
  std::lock_guard<std::mutex> lock(state_->mutex);
  const int instance = state_->instances[key + "@" + std::to_string(rank)]++;
  std::shared_ptr<Group>& group = state_->groups[key + "#" + std::to_string(instance)];
  if (!group) {
    group = std::make_shared<Group>();
    group->name = name;
    group->label = name;
    group->ranks = ranks;
    group->next.assign(ranks.size(), 0);
    for (size_t m = 0; m < ranks.size(); ++m) {
      const int stands_for = representative_.at(static_cast<size_t>(ranks[m]));
      auto found = std::find(ranks.begin(), ranks.end(), stands_for);
      if (found == ranks.end()) {
        throw Error("dry run: group " + name + " has rank " + std::to_string(ranks[m]) +
                    " but not the simulated rank that stands for it (" + std::to_string(stands_for) + ")");
      }
      group->stand_in.push_back(static_cast<size_t>(found - ranks.begin()));
      if (stands_for == ranks[m]) ++group->present;
    }
  }
  return std::make_unique<SimulatedComm>(*state_, group, member, events);
}

void SimulatedWorld::rank_started() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  ++state_->live;
}

void SimulatedWorld::enter() {
  if (state_->take_turns) state_->turn.lock();
}

void SimulatedWorld::rank_finished() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& state = *state_;
  if (state.take_turns) state.turn.unlock();
  --state.live;
  if (state.live > 0 && state.deadlocked()) {
    state.stop_locked("deadlock: a rank ended its step while others still wait for it;" + state.describe_waits());
  }
}

void SimulatedWorld::stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stop_locked(reason);
}

std::string SimulatedWorld::failure() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failure;
}

std::vector<std::string> SimulatedWorld::unreceived_sends() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::string> unreceived;
  for (const auto& [key, box] : state_->mailboxes) {
    for (const auto& message : box->messages) {
      unreceived.push_back(box->from_to + ": " + shape_text(message->tensor) + " sent at '" + message->site + "'");
    }
  }
  return unreceived;
}

}  // namespace titan
