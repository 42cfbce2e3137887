#include "ft/quorum_results.hpp"

#include <algorithm>
#include <map>

#include "titan/error.hpp"

namespace titan::ft {

bool QuorumResult::operator==(const QuorumResult& o) const {
  return quorum_id == o.quorum_id && created_ns == o.created_ns && replica_rank == o.replica_rank && replica_world_size == o.replica_world_size &&
         store_address == o.store_address && max_step == o.max_step && max_replica_rank == o.max_replica_rank &&
         max_world_size == o.max_world_size && heal == o.heal &&
         recover_src_replica_rank == o.recover_src_replica_rank &&
         recover_dst_replica_ranks == o.recover_dst_replica_ranks && commit_failures == o.commit_failures &&
         replica_ids == o.replica_ids;
}

QuorumResult compute_quorum_results(const std::string& replica_id, int64_t group_rank, const Quorum& quorum,
                                    bool init_sync) {
  std::vector<QuorumMember> participants = quorum.participants;
  std::sort(participants.begin(), participants.end(),
            [](const QuorumMember& a, const QuorumMember& b) { return a.replica_id < b.replica_id; });
  const auto self = std::find_if(participants.begin(), participants.end(),
                                 [&](const QuorumMember& p) { return p.replica_id == replica_id; });
  if (self == participants.end()) {
    throw Error("fault_tolerance: replica group '" + replica_id + "' is not in the quorum " +
                std::to_string(quorum.quorum_id) + " the Lighthouse returned");
  }
  QuorumResult result;
  result.quorum_id = quorum.quorum_id;
  result.created_ns = quorum.created_ns;
  result.replica_rank = self - participants.begin();
  result.replica_world_size = static_cast<int64_t>(participants.size());

  for (const QuorumMember& p : participants) result.max_step = std::max(result.max_step, p.step);
  std::vector<size_t> at_max;  // indices of the participants at max_step
  for (size_t i = 0; i < participants.size(); ++i) {
    if (participants[i].step != result.max_step) continue;
    if (participants[i].replica_id == replica_id) result.max_replica_rank = static_cast<int64_t>(at_max.size());
    at_max.push_back(i);
  }
  result.max_world_size = static_cast<int64_t>(at_max.size());
  // One TCPStore per group; each rank meets its peers at one of the
  // up-to-date groups', spread by rank.
  const QuorumMember& primary = participants[at_max[static_cast<size_t>(group_rank) % at_max.size()]];
  result.store_address = primary.store_address;

  const bool force_recover = init_sync && result.max_step == 0;
  std::vector<size_t> behind, up_to_date;
  for (size_t i = 0; i < participants.size(); ++i) {
    const bool recovers = participants[i].step != result.max_step ||
                          (force_recover && participants[i].replica_id != primary.replica_id);
    (recovers ? behind : up_to_date).push_back(i);
  }
  // The groups behind take their sources from the up-to-date ones in turn.
  std::map<size_t, std::vector<int64_t>> assignments;
  for (size_t i = 0; i < behind.size(); ++i) {
    const size_t source = up_to_date[(i + static_cast<size_t>(group_rank)) % up_to_date.size()];
    assignments[source].push_back(static_cast<int64_t>(behind[i]));
    if (behind[i] == static_cast<size_t>(result.replica_rank)) result.recover_src_replica_rank = source;
  }
  result.heal = result.recover_src_replica_rank.has_value();
  auto mine = assignments.find(static_cast<size_t>(result.replica_rank));
  if (mine != assignments.end()) result.recover_dst_replica_ranks = mine->second;
  for (const QuorumMember& p : participants) {
    result.commit_failures = std::max(result.commit_failures, p.commit_failures);
    result.replica_ids.push_back(p.replica_id);
  }
  return result;
}

}  // namespace titan::ft
