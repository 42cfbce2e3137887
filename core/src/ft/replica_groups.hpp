// Fault tolerance across replica groups (TorchTitan's torchft integration):
// the job's data-parallel replicas are separate groups, each its own launch
// (FSDP, TP, PP, ... inside it as usual). Every step a group's rank 0 asks
// torchft's Lighthouse for the quorum (the groups alive now); the group's
// ranks learn it from rank 0. Gradients are averaged over the quorum's
// groups only (the dp_replicate role, over a Gloo group rebuilt whenever
// the quorum changes); before the optimizer every rank votes, and a step in
// which any collective failed is discarded. A group behind the others (a
// relaunched one) copies the live state of an up-to-date peer, chosen as
// torchft chooses it, and joins the next step.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include "ft/lighthouse_client.hpp"
#include "ft/quorum_results.hpp"
#include "titan/checkpointer.hpp"
#include "titan/comm.hpp"
#include "titan/job_config.hpp"

namespace c10d {
class TCPStore;
}

namespace titan {

class ReplicaGroups {
 public:
  // `group`: every rank of this replica group (null when it has one rank);
  // `group_rank`: this rank's place in it.
  ReplicaGroups(const FaultToleranceConfig& config, Comm* group, int group_rank, int group_world_size);
  ~ReplicaGroups();

  const std::string& replica_id() const { return replica_id_; }
  // Data: this group's share is its replica_id's slot of group_size.
  int64_t data_rank(int64_t dp_rank, int64_t dp_degree) const { return config_.replica_id * dp_degree + dp_rank; }
  int64_t data_degree(int64_t dp_degree) const { return config_.group_size * dp_degree; }

  // Waits for a quorum holding this group with at least min_replica_size
  // groups (`committed`: the steps this group has committed), and rebuilds
  // the cross-group comm when the quorum is new.
  const ft::QuorumResult& join(int64_t committed);
  // After join(): a group behind receives `state` (its tensors in place, its
  // values returned); an up-to-date source sends its own to the groups
  // assigned to it. Returns whether this group received.
  bool transfer_state(TrainState& state);
  // Whether transfer_state has anything to do after this join().
  bool transfers_state() const {
    return replicas_ && (result_.heal || !result_.recover_dst_replica_ranks.empty());
  }

  // The step's gradients summed over the quorum's groups, divided by their
  // number. A failure (a peer gone) is kept for the vote, not thrown.
  void average_gradients(const std::vector<at::Tensor>& gradients);
  // A tensor of the step (e.g. MoE's tokens per expert) summed over the
  // quorum's groups, in place; a failure is kept for the vote.
  void sum(at::Tensor& tensor);
  // Every rank of the group votes; false (a failed collective here or in
  // the group) discards the step everywhere in the group.
  bool should_commit();
  int64_t participants() const { return result_.replica_world_size; }
  // The quorum's first group (by replica id) writes the checkpoints.
  bool writes_checkpoints() const { return result_.replica_rank == 0; }
  double member_mask() const;  // the quorum's groups: bit i for group i (metrics.jsonl ft_replica_mask)

 private:
  void heartbeats();
  ft::Quorum ask_lighthouse(int64_t committed);
  void rebuild_comm();
  std::string missing_groups(const ft::QuorumResult& result) const;

  const FaultToleranceConfig config_;
  const std::string replica_id_;
  std::string address_;  // where the other groups reach this rank (reachable_address in the .cpp)
  Comm* group_;
  const int group_rank_, group_world_size_;
  std::unique_ptr<ft::LighthouseClient> lighthouse_;  // group rank 0 only
  c10::intrusive_ptr<c10d::TCPStore> store_;          // this group's, hosted by its rank 0
  std::string store_address_;
  ft::QuorumResult result_;
  std::string comm_identity_;       // the quorum replicas_ was built for (comm_identity in the .cpp)
  std::unique_ptr<Comm> replicas_;  // this rank and the same rank of every group in the quorum
  std::string error_;               // the step's failed collective, if any
  int64_t commit_failures_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread heartbeat_thread_;
};

}  // namespace titan
