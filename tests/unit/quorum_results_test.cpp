// What a quorum means for each rank of each replica group: the semantics of
// torchft's manager (src/manager.rs, compute_quorum_results), which Titan's
// groups must share with torchft's for healing to pair up.
#include <doctest/doctest.h>

#include "ft/quorum_results.hpp"
#include "titan/error.hpp"

namespace {

using titan::ft::compute_quorum_results;
using titan::ft::Quorum;
using titan::ft::QuorumMember;

QuorumMember member(const std::string& id, int64_t step, int64_t commit_failures = 0) {
  QuorumMember m;
  m.replica_id = id;
  m.address = "addr_" + id;
  m.store_address = "store_" + id;
  m.step = step;
  m.commit_failures = commit_failures;
  return m;
}

}  // namespace

TEST_SUITE("quorum results") {
  TEST_CASE("quorum results: at step 0 every group copies the primary, which each rank of a group picks by its "
            "rank; without init_sync nobody heals") {
    Quorum quorum{4, {member("b", 0), member("a", 0)}};  // sorted by id: a, b
    auto a0 = compute_quorum_results("a", 0, quorum, true), b0 = compute_quorum_results("b", 0, quorum, true);
    CHECK(a0.replica_rank == 0);
    CHECK(b0.replica_rank == 1);
    CHECK(a0.store_address == "store_a");  // rank 0's primary: the first group at max_step
    CHECK_FALSE(a0.heal);
    CHECK(a0.recover_dst_replica_ranks == std::vector<int64_t>{1});
    CHECK(b0.heal);
    CHECK(b0.recover_src_replica_rank == 0);
    CHECK(b0.recover_dst_replica_ranks.empty());
    // Rank 1 of each group meets at the second group's store, and that group is its primary.
    auto a1 = compute_quorum_results("a", 1, quorum, true), b1 = compute_quorum_results("b", 1, quorum, true);
    CHECK(a1.store_address == "store_b");
    CHECK(a1.heal);
    CHECK(a1.recover_src_replica_rank == 1);
    CHECK_FALSE(b1.heal);
    CHECK(b1.recover_dst_replica_ranks == std::vector<int64_t>{0});
    CHECK_FALSE(compute_quorum_results("b", 0, quorum, false).heal);
    CHECK(a0.quorum_id == 4);
    CHECK(a0.replica_ids == std::vector<std::string>{"a", "b"});
  }

  TEST_CASE("quorum results: groups behind max_step take their sources from the up-to-date groups in turn, "
            "offset by the rank in the group") {
    // Sorted: g0 (step 3), g1 (5), g2 (3), g3 (5), g4 (3).
    Quorum quorum{9, {member("g3", 5), member("g0", 3), member("g4", 3), member("g1", 5, 2), member("g2", 3)}};
    auto g0 = compute_quorum_results("g0", 0, quorum, true);
    CHECK(g0.max_step == 5);
    CHECK(g0.replica_world_size == 5);
    CHECK(g0.max_world_size == 2);
    CHECK_FALSE(g0.max_replica_rank.has_value());
    CHECK(g0.heal);
    CHECK(g0.recover_src_replica_rank == 1);
    CHECK(g0.commit_failures == 2);  // the largest of any member's
    CHECK(compute_quorum_results("g2", 0, quorum, true).recover_src_replica_rank == 3);
    CHECK(compute_quorum_results("g4", 0, quorum, true).recover_src_replica_rank == 1);
    auto g1 = compute_quorum_results("g1", 0, quorum, true);
    CHECK_FALSE(g1.heal);
    CHECK(g1.max_replica_rank == 0);
    CHECK(g1.recover_dst_replica_ranks == std::vector<int64_t>{0, 4});
    CHECK(compute_quorum_results("g3", 0, quorum, true).recover_dst_replica_ranks == std::vector<int64_t>{2});
    // Rank 1 of each group: the turn starts one source later.
    CHECK(compute_quorum_results("g0", 1, quorum, true).recover_src_replica_rank == 3);
    CHECK(compute_quorum_results("g2", 1, quorum, true).recover_src_replica_rank == 1);
    CHECK(compute_quorum_results("g3", 1, quorum, true).recover_dst_replica_ranks == std::vector<int64_t>{0, 4});
    CHECK(compute_quorum_results("g0", 1, quorum, true).store_address == "store_g3");
  }

  TEST_CASE("quorum results: a group missing from the quorum is an error naming it") {
    Quorum quorum{2, {member("a", 1)}};
    CHECK_THROWS_WITH_AS(compute_quorum_results("titan_ft_7", 0, quorum, true),
                         doctest::Contains("'titan_ft_7' is not in the quorum 2"), titan::Error);
  }
}
