// What a quorum means for one rank of one replica group, computed as
// torchft's manager computes it (src/manager.rs, compute_quorum_results),
// so that Titan's groups and torchft's agree on who heals whom.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ft/lighthouse_client.hpp"

namespace titan::ft {

struct QuorumResult {
  int64_t quorum_id = 0;
  int64_t created_ns = 0;          // the quorum's (titan's addition: tells quorums of a restarted Lighthouse apart)
  int64_t replica_rank = 0;        // this group's place among the participants, sorted by replica id
  int64_t replica_world_size = 0;  // participants, behind ones included
  std::string store_address;       // the TCPStore where this rank meets its peers in other groups
  int64_t max_step = 0;            // the most steps any participant has committed
  std::optional<int64_t> max_replica_rank;  // this group's place among those at max_step (none: behind)
  int64_t max_world_size = 0;               // participants at max_step
  bool heal = false;                        // this group copies the state of recover_src_replica_rank
  std::optional<int64_t> recover_src_replica_rank;
  std::vector<int64_t> recover_dst_replica_ranks;  // the groups that copy this group's state
  int64_t commit_failures = 0;                     // the largest participant's count
  std::vector<std::string> replica_ids;            // sorted

  bool operator==(const QuorumResult& other) const;
};

// `group_rank`: this rank's within its replica group (each rank of a group
// pairs with the same rank of the others, so the work spreads over the
// up-to-date groups by rank). `init_sync`: at step 0 every group but the
// primary copies the primary's state, so all start equal.
QuorumResult compute_quorum_results(const std::string& replica_id, int64_t group_rank, const Quorum& quorum,
                                    bool init_sync);

}  // namespace titan::ft
