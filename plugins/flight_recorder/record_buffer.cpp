// Slots are reused in place, so a steady run allocates almost nothing per
// collective (strings and shape vectors keep their capacity).
#include "record_buffer.h"

namespace titan::flight_recorder {

namespace {
bool point_to_point(const std::string& op) { return op == "send" || op == "recv"; }
}  // namespace

const char* state_name(State state) {
  switch (state) {
    case State::scheduled: return "scheduled";
    case State::started: return "started";
    case State::completed: return "completed";
    case State::failed: return "failed";
  }
  return "unknown";
}

RecordBuffer::RecordBuffer(size_t capacity) : ring_(capacity) {}

GroupStatus& RecordBuffer::group(const CollectiveEvent& event) {
  auto found = groups_.find(event.group);
  if (found != groups_.end() && found->second.ranks == event.group_ranks) return found->second;
  // A second group of the same name but other members gets its own key.
  std::string key = event.group;
  for (int rank : event.group_ranks) key += "," + std::to_string(rank);
  GroupStatus& status = found == groups_.end() ? groups_[event.group] : groups_[key];
  if (status.name.empty()) {
    status.name = event.group;
    status.ranks = event.group_ranks;
  }
  return status;
}

P2pStatus* RecordBuffer::stream(const GroupStatus& group, const CollectiveEvent& event, bool create) {
  if (!point_to_point(event.op) || event.peer < 0) return nullptr;
  auto key = std::make_tuple(&group, event.op == "send", event.peer, event.tag);
  auto found = streams_.find(key);
  if (found != streams_.end()) return &found->second;
  if (!create || streams_.size() >= kMaxP2pStreams) return nullptr;
  P2pStatus& status = streams_[key];
  status.group = event.group;
  status.group_ranks = event.group_ranks;
  status.op = event.op;
  status.peer = event.peer;
  status.tag = event.tag;
  return &status;
}

void RecordBuffer::enqueue(const CollectiveEvent& event) {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  Record& slot = ring_[next_id_ % ring_.size()];
  slot.id = next_id_++;
  slot.event = event;
  slot.start_s = slot.end_s = 0;
  slot.state = State::scheduled;
  slot.collective_sequence = slot.p2p_sequence = -1;
  GroupStatus& status = group(event);
  status.last_enqueued = static_cast<int64_t>(event.sequence);
  if (!point_to_point(event.op)) {
    slot.collective_sequence = ++status.last_collective;
  } else if (P2pStatus* p2p = stream(status, event, true)) {
    slot.p2p_sequence = ++p2p->last_enqueued;
  }
}

Record* RecordBuffer::find(const CollectiveEvent& event) {
  // The op is nearly always among the newest few records.
  const uint64_t held = std::min<uint64_t>(next_id_, ring_.size());
  for (uint64_t back = 1; back <= held; ++back) {
    Record& record = ring_[(next_id_ - back) % ring_.size()];
    if (record.event.sequence == event.sequence && record.event.group == event.group &&
        record.event.op == event.op && record.event.group_ranks == event.group_ranks) {
      return &record;
    }
  }
  return nullptr;
}

void RecordBuffer::start(const CollectiveEvent& event) {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  if (Record* record = find(event)) {
    record->start_s = event.time_s;
    record->state = State::started;
  }
  group(event).last_started = static_cast<int64_t>(event.sequence);
}

void RecordBuffer::finish(const CollectiveEvent& event, bool ok) {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  Record* record = find(event);
  if (record) {
    record->end_s = event.time_s;
    record->state = ok ? State::completed : State::failed;
  }
  if (!ok) return;
  GroupStatus& status = group(event);
  status.last_completed = static_cast<int64_t>(event.sequence);
  // A record already overwritten no longer knows its number: rare (the ring
  // went round while this op was in flight), and the next completion catches up.
  P2pStatus* p2p = record ? stream(status, event, false) : nullptr;
  if (p2p && record->p2p_sequence > p2p->last_completed) p2p->last_completed = record->p2p_sequence;
}

Snapshot RecordBuffer::snapshot(std::chrono::milliseconds wait) const {
  Snapshot snapshot;
  std::unique_lock<std::timed_mutex> lock(mutex_, std::defer_lock);
  snapshot.complete = wait == std::chrono::milliseconds::max() ? (lock.lock(), true) : lock.try_lock_for(wait);
  const uint64_t held = std::min<uint64_t>(next_id_, ring_.size());
  for (uint64_t id = next_id_ - held; id < next_id_; ++id) snapshot.records.push_back(ring_[id % ring_.size()]);
  for (const auto& [key, status] : groups_) snapshot.groups.push_back(status);
  for (const auto& [key, status] : streams_) snapshot.p2p.push_back(status);
  snapshot.total_recorded = next_id_;
  snapshot.capacity = ring_.size();
  return snapshot;
}

bool RecordBuffer::oldest_outstanding(Record& out) const {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  const uint64_t held = std::min<uint64_t>(next_id_, ring_.size());
  for (uint64_t id = next_id_ - held; id < next_id_; ++id) {
    const Record& record = ring_[id % ring_.size()];
    if (record.state == State::started || record.state == State::scheduled) {
      out = record;
      return true;
    }
  }
  return false;
}

}  // namespace titan::flight_recorder
