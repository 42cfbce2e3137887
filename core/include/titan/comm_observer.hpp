// CommObserver: sees every collective and point-to-point op the comm layer
// issues.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

struct CollectiveEvent {
  uint64_t sequence = 0;        // per process group
  std::string op;               // all_reduce, all_gather, ...
  std::string group;            // process group name, e.g. "dp_shard"
  std::vector<int> group_ranks;
  std::vector<std::vector<int64_t>> shapes;
  std::string dtype;
  int64_t bytes = 0;
  std::string call_site;        // "step 12 / fsdp all_gather layers.3"
  double time_s = 0;            // monotonic seconds at the event
  // send/recv only: the other end as a global rank and the message tag (a
  // send and its recv use the same tag); -1 and 0 for collectives.
  int peer = -1;
  int tag = 0;
  // An all-to-all with uneven splits: the rows sent to and received from
  // each member, in group order (its shapes differ between ranks by design;
  // these must agree pairwise). Empty for every other call.
  std::vector<int64_t> send_rows, recv_rows;
};

class CommObserver {
 public:
  virtual ~CommObserver() = default;
  virtual void on_enqueue(const CollectiveEvent& event) = 0;
  virtual void on_start(const CollectiveEvent& /*event*/) {}
  virtual void on_complete(const CollectiveEvent& event, bool ok) = 0;
};

}  // namespace titan
