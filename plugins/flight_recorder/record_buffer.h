// The ring buffer: the last `capacity` collectives and point-to-point ops of
// this rank, plus counters that survive wrapping (what was last enqueued and
// last completed on each group and on each send/recv stream), as PyTorch's
// flight recorder keeps them.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "titan/comm_observer.hpp"

namespace titan::flight_recorder {

enum class State { scheduled, started, completed, failed };
const char* state_name(State state);

struct Record {
  uint64_t id = 0;  // position in this rank's history (0, 1, ...)
  CollectiveEvent event;  // time_s of the event is the enqueue time
  // Collectives: the n-th collective on the group (event.sequence also counts
  // the group's send/recv). send/recv: the n-th op of this stream (see
  // P2pStatus); -1 when the stream is not tracked (kMaxP2pStreams).
  int64_t collective_sequence = -1, p2p_sequence = -1;
  double start_s = 0, end_s = 0;  // monotonic seconds; 0 = not reached
  State state = State::scheduled;
};

struct GroupStatus {
  std::string name;
  std::vector<int> ranks;
  int64_t last_enqueued = -1, last_started = -1, last_completed = -1;
  int64_t last_collective = -1;  // collective_sequence of the last collective enqueued
};

// One stream of point-to-point ops: this rank's sends to `peer` (or recvs
// from it) on one group with one tag. The n-th send of A's stream to B
// matches the n-th recv of B's stream from A (Gloo and NCCL match in the
// order posted per tag); counters in p2p_sequence numbers.
struct P2pStatus {
  std::string group;
  std::vector<int> group_ranks;
  std::string op;  // send or recv
  int peer = -1;   // global rank
  int tag = 0;
  int64_t last_enqueued = -1, last_completed = -1;
};

// Tags repeat (per stage boundary and microbatch in a pipeline, per layer in
// ring attention), so streams are few; this bounds memory if a caller ever
// uses a fresh tag per message: later streams go unnumbered.
constexpr size_t kMaxP2pStreams = 4096;

struct Snapshot {
  std::vector<Record> records;  // oldest first
  std::vector<GroupStatus> groups;
  std::vector<P2pStatus> p2p;
  uint64_t total_recorded = 0;
  size_t capacity = 0;
  bool complete = true;  // false: the lock could not be taken (a crash inside the recorder)
};

class RecordBuffer {
 public:
  explicit RecordBuffer(size_t capacity);

  void enqueue(const CollectiveEvent& event);
  void start(const CollectiveEvent& event);
  void finish(const CollectiveEvent& event, bool ok);

  // A copy. From crash handlers pass a wait: a thread that died holding the
  // lock must not block the dump forever (the copy is then taken unlocked).
  Snapshot snapshot(std::chrono::milliseconds wait = std::chrono::milliseconds::max()) const;
  // The oldest record still started and not finished, if any.
  bool oldest_outstanding(Record& out) const;

 private:
  Record* find(const CollectiveEvent& event);  // newest record of this op, or null
  GroupStatus& group(const CollectiveEvent& event);
  // The event's send/recv stream; null for a collective or an untracked stream.
  P2pStatus* stream(const GroupStatus& group, const CollectiveEvent& event, bool create);

  mutable std::timed_mutex mutex_;
  std::vector<Record> ring_;
  uint64_t next_id_ = 0;
  std::map<std::string, GroupStatus> groups_;
  // Keyed by (the group's status, is a send, peer, tag).
  std::map<std::tuple<const GroupStatus*, bool, int, int>, P2pStatus> streams_;
};

}  // namespace titan::flight_recorder
