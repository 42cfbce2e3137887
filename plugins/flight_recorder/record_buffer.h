// The ring buffer: the last `capacity` collectives of this rank, plus
// per-group counters that survive wrapping (what was last enqueued and last
// completed on each group), as PyTorch's flight recorder keeps them.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "titan/comm_observer.hpp"

namespace titan::flight_recorder {

enum class State { scheduled, started, completed, failed };
const char* state_name(State state);

struct Record {
  uint64_t id = 0;  // position in this rank's history (0, 1, ...)
  CollectiveEvent event;  // time_s of the event is the enqueue time
  double start_s = 0, end_s = 0;  // monotonic seconds; 0 = not reached
  State state = State::scheduled;
};

struct GroupStatus {
  std::string name;
  std::vector<int> ranks;
  int64_t last_enqueued = -1, last_started = -1, last_completed = -1;
};

struct Snapshot {
  std::vector<Record> records;  // oldest first
  std::vector<GroupStatus> groups;
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

  mutable std::timed_mutex mutex_;
  std::vector<Record> ring_;
  uint64_t next_id_ = 0;
  std::map<std::string, GroupStatus> groups_;
};

}  // namespace titan::flight_recorder
