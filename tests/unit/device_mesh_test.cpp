// Mesh degrees from the plugins' requests, FSDP's row split, layouts, and
// the comm layer on a single process (groups of one: every collective is
// the identity). The multi-rank behaviour is in multirank_test.cpp.
#include "doctest_torch.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/error.hpp"
#include "titan/placement.hpp"

using titan::MeshDimRequest;
using titan::resolve_mesh_degrees;

namespace {

std::string mesh_error_of(const std::vector<MeshDimRequest>& requests, int world_size) {
  try {
    resolve_mesh_degrees(requests, world_size);
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "(no error)";
}


std::map<std::string, int64_t> degrees(int64_t pp, int64_t dp_replicate, int64_t dp_shard, int64_t cp, int64_t tp) {
  return {{"pp", pp}, {"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"cp", cp}, {"tp", tp}};
}

}  // namespace

TEST_SUITE("device_mesh") {
  TEST_CASE("mesh dims come in the order of TorchTitan with pp outermost and tp innermost") {
    CHECK(titan::mesh_dim_order() == std::vector<std::string>{"pp", "dp_replicate", "dp_shard", "cp", "tp"});
  }

  TEST_CASE("resolve_mesh_degrees: unrequested dims are 1 and -1 takes the rest of the world") {
    CHECK(resolve_mesh_degrees({}, 1) == degrees(1, 1, 1, 1, 1));
    CHECK(resolve_mesh_degrees({{"dp_shard", -1}}, 8) == degrees(1, 1, 8, 1, 1));
    CHECK(resolve_mesh_degrees({{"tp", 2}, {"dp_shard", -1}}, 8) == degrees(1, 1, 4, 1, 2));
    CHECK(resolve_mesh_degrees({{"dp_shard", -1}, {"dp_replicate", 2}}, 4) == degrees(1, 2, 2, 1, 1));
    CHECK(resolve_mesh_degrees({{"dp_shard", 2}, {"tp", 2}}, 4) == degrees(1, 1, 2, 1, 2));
    // Two plugins asking for the same dim and degree agree.
    CHECK(resolve_mesh_degrees({{"tp", 2}, {"tp", 2}, {"dp_shard", -1}, {"dp_shard", -1}}, 4) ==
          degrees(1, 1, 2, 1, 2));
    // -1 may be left with 1 when the fixed degrees fill the world.
    CHECK(resolve_mesh_degrees({{"tp", 4}, {"dp_shard", -1}}, 4) == degrees(1, 1, 1, 1, 4));
  }

  TEST_CASE("resolve_mesh_degrees: degrees that do not multiply to the world size name the requests and the size") {
    std::string message = mesh_error_of({{"dp_shard", 2}, {"tp", 2}}, 8);
    CHECK_MESSAGE(titan::test::has(message, "dp_shard=2, tp=2"), message);
    CHECK_MESSAGE(titan::test::has(message, "multiply to 4"), message);
    CHECK_MESSAGE(titan::test::has(message, "world size is 8"), message);
    message = mesh_error_of({}, 2);
    CHECK_MESSAGE(titan::test::has(message, "multiply to 1"), message);
    CHECK_MESSAGE(titan::test::has(message, "world size is 2"), message);
    message = mesh_error_of({{"tp", 3}, {"dp_shard", -1}}, 8);
    CHECK_MESSAGE(titan::test::has(message, "world size 8 is not divisible"), message);
    CHECK_MESSAGE(titan::test::has(message, "dp_shard=-1"), message);
  }

  TEST_CASE("resolve_mesh_degrees: two -1 dims or an unknown dim or a bad degree or disagreeing plugins are errors") {
    std::string message = mesh_error_of({{"dp_shard", -1}, {"tp", -1}}, 8);
    CHECK_MESSAGE(titan::test::has(message, "both dp_shard and tp are -1"), message);
    message = mesh_error_of({{"dpshard", 2}}, 2);
    CHECK_MESSAGE(titan::test::has(message, "'dpshard'"), message);
    CHECK_MESSAGE(titan::test::has(message, "known dims: pp, dp_replicate, dp_shard, cp, tp"), message);
    message = mesh_error_of({{"tp", 0}}, 2);
    CHECK_MESSAGE(titan::test::has(message, "tp degree 0 is invalid"), message);
    message = mesh_error_of({{"tp", -2}}, 2);
    CHECK_MESSAGE(titan::test::has(message, "tp degree -2 is invalid"), message);
    message = mesh_error_of({{"tp", 2}, {"tp", 4}}, 8);
    CHECK_MESSAGE(titan::test::has(message, "disagree on mesh dim tp: 2 vs 4"), message);
  }

  TEST_CASE("resolve_mesh_degrees: a dim one plugin fixes and another leaves at -1 keeps the fixed degree") {
    // The fixed degree fills the world: nothing is left over.
    CHECK(resolve_mesh_degrees({{"dp_shard", 2}, {"dp_shard", -1}}, 2) == degrees(1, 1, 2, 1, 1));
    CHECK(resolve_mesh_degrees({{"dp_shard", -1}, {"dp_shard", 2}, {"tp", 2}}, 4) == degrees(1, 1, 2, 1, 2));
    // The fixed degree does not fill the world: an error, not a silent
    // change of what a plugin asked for.
    CHECK_THROWS_AS(resolve_mesh_degrees({{"dp_shard", 2}, {"dp_shard", -1}}, 8), titan::Error);
  }

  TEST_CASE("mesh_slices: the dense groups of a rank, row-major with tp fastest") {
    // 8 ranks: dp_shard 2 x cp 2 x tp 2; rank = (dp_shard * 2 + cp) * 2 + tp.
    titan::MeshSlices slices = titan::mesh_slices(degrees(1, 1, 2, 2, 2), {}, 6);
    std::map<std::string, std::vector<int>> groups;
    for (const auto& group : slices.groups) groups[group.name] = group.ranks;
    CHECK(groups["tp"] == std::vector<int>{6, 7});
    CHECK(groups["cp"] == std::vector<int>{4, 6});
    CHECK(groups["dp_shard"] == std::vector<int>{2, 6});
    CHECK(groups["dp_shard_cp"] == std::vector<int>{0, 2, 4, 6});
    CHECK(groups["dp_cp"] == std::vector<int>{0, 2, 4, 6});
    CHECK(slices.coordinates["dp_shard_cp"] == 3);
    CHECK(slices.degrees["dp_shard_cp"] == 4);
  }

  TEST_CASE("mesh_slices: a plugin's split of dp_shard_cp into efsdp x ep, the same groups seen from every member") {
    const auto dense = degrees(1, 1, 2, 2, 2);
    const std::vector<titan::MeshSplitRequest> ep{{"dp_shard_cp", "efsdp", "ep", 2}};
    std::map<std::string, std::vector<int>> rank0, rank6;
    for (const auto& group : titan::mesh_slices(dense, ep, 0).groups) rank0[group.name] = group.ranks;
    for (const auto& group : titan::mesh_slices(dense, ep, 6).groups) rank6[group.name] = group.ranks;
    // dp_shard_cp of tp 0 is {0, 2, 4, 6}: consecutive pairs share experts' ep group.
    CHECK(rank0["ep"] == std::vector<int>{0, 2});
    CHECK(rank0["efsdp"] == std::vector<int>{0, 4});
    CHECK(rank6["ep"] == std::vector<int>{4, 6});
    CHECK(rank6["efsdp"] == std::vector<int>{2, 6});
    CHECK(rank0["tp"] == std::vector<int>{0, 1});  // the dense mesh is unchanged beside it
    titan::MeshSlices six = titan::mesh_slices(dense, ep, 6);
    CHECK(six.degrees["ep"] == 2);
    CHECK(six.degrees["efsdp"] == 2);
    CHECK(six.coordinates["ep"] == 1);
    CHECK(six.coordinates["efsdp"] == 1);
    // Every member of a group computes the same ranks and the same label
    // (the label names the group in the store), and distinct groups differ.
    std::map<std::string, std::vector<int>> by_label;
    for (int rank = 0; rank < 8; ++rank) {
      for (const auto& group : titan::mesh_slices(dense, ep, rank).groups) {
        CHECK(std::find(group.ranks.begin(), group.ranks.end(), rank) != group.ranks.end());
        auto [it, inserted] = by_label.emplace(group.label, group.ranks);
        CHECK_MESSAGE(it->second == group.ranks, group.label);
      }
    }
    CHECK(by_label.count("ep/pp0/dp_replicate0/tp1/efsdp1") == 1);
  }

  TEST_CASE("mesh_slices: a split of dp_shard_cp_tp borrows the tp ranks first (ep over tp, then dp_shard)") {
    // dp_shard 2 x tp 2: ranks {0, 1} and {2, 3} are tp groups.
    const auto dense = degrees(1, 1, 2, 1, 2);
    const std::vector<titan::MeshSplitRequest> ep{{"dp_shard_cp_tp", "efsdp", "ep", 2}};
    std::map<std::string, std::vector<int>> rank3;
    for (const auto& group : titan::mesh_slices(dense, ep, 3).groups) rank3[group.name] = group.ranks;
    CHECK(rank3["dp_shard_cp_tp"] == std::vector<int>{0, 1, 2, 3});
    CHECK(rank3["ep"] == std::vector<int>{2, 3});     // = its tp group
    CHECK(rank3["efsdp"] == std::vector<int>{1, 3});  // = its dp_shard group
    CHECK(rank3["tp"] == std::vector<int>{2, 3});
  }

  TEST_CASE("check_mesh_splits: a span that is no dense dim, a taken name or a degree that does not divide") {
    const auto dense = degrees(1, 1, 2, 2, 1);
    auto split_error = [&](titan::MeshSplitRequest split) {
      try {
        titan::check_mesh_splits({split}, dense);
      } catch (const titan::Error& error) {
        return std::string(error.what());
      }
      return std::string("(no error)");
    };
    CHECK(split_error({"dp_shard_cp", "efsdp", "ep", 4}) == "(no error)");
    CHECK(titan::test::has(split_error({"experts", "efsdp", "ep", 2}), "'experts' is not a dim of the dense mesh"));
    CHECK(titan::test::has(split_error({"dp_shard_cp", "efsdp", "tp", 2}), "the name 'tp' is empty or already a mesh dim"));
    std::string divide = split_error({"dp_shard_cp", "efsdp", "ep", 3});
    CHECK_MESSAGE(titan::test::has(divide, "ep degree 3 does not divide the 4 ranks of dp_shard_cp"), divide);
    CHECK_THROWS_AS(titan::mesh_slices(dense, {{"dp_shard_cp", "efsdp", "ep", 3}}, 0), titan::Error);
  }

  TEST_CASE("even_row_shard: ceil(rows / ranks) rows each, trailing ranks fewer or none") {
    auto rows = [](int64_t total, int64_t ranks) {
      std::vector<std::pair<int64_t, int64_t>> ranges;
      for (int64_t rank = 0; rank < ranks; ++rank) {
        auto range = titan::even_row_shard(total, ranks, rank);
        ranges.emplace_back(range.begin, range.length);
      }
      return ranges;
    };
    using Ranges = std::vector<std::pair<int64_t, int64_t>>;
    CHECK(rows(5, 4) == Ranges{{0, 2}, {2, 2}, {4, 1}, {5, 0}});
    CHECK(rows(8, 4) == Ranges{{0, 2}, {2, 2}, {4, 2}, {6, 2}});
    CHECK(rows(2, 4) == Ranges{{0, 1}, {1, 1}, {2, 0}, {2, 0}});
    CHECK(rows(0, 2) == Ranges{{0, 0}, {0, 0}});
    CHECK(rows(7, 1) == Ranges{{0, 7}});
    // Every row is held exactly once.
    for (int64_t total : {1, 3, 9, 17}) {
      for (int64_t ranks : {1, 2, 3, 4, 8}) {
        int64_t next = 0;
        for (auto [begin, length] : rows(total, ranks)) {
          CHECK(begin == next);
          next = begin + length;
        }
        CHECK(next == total);
      }
    }
  }

  TEST_CASE("local_piece cuts the box of the layout and describe and str say what the layout is") {
    at::Tensor full = at::arange(15, at::kFloat).reshape({5, 3});
    titan::TensorLayout layout;
    layout.global_shape = {5, 3};
    layout.local_offset = {4, 0};
    layout.local_shape = {1, 3};
    layout.mesh_dims = {"dp_shard"};
    layout.placements = {titan::Placement::shard(0)};
    CHECK(titan::local_piece(full, layout).equal(full.narrow(0, 4, 1)));
    layout.local_offset = {5, 0};
    layout.local_shape = {0, 3};
    CHECK(titan::local_piece(full, layout).numel() == 0);
    CHECK(layout.is_sharded());
    CHECK(layout.local_numel() == 0);
    CHECK(layout.describe() == "[5, 3] S(0) over dp_shard, local [0, 3] at [5, 0]");
    CHECK_THROWS_AS(titan::local_piece(at::zeros({4, 3}), layout), titan::Error);

    auto replicated = titan::TensorLayout::replicated({2, 3});
    CHECK(!replicated.is_sharded());
    CHECK(replicated.local_numel() == 6);
    CHECK(titan::local_piece(full.narrow(0, 0, 2), replicated).equal(full.narrow(0, 0, 2)));
    CHECK(titan::Placement::replicate().str() == "R");
    CHECK(titan::Placement::shard(1).str() == "S(1)");
    CHECK(titan::Placement::partial().str() == "P");
    CHECK(titan::Placement::shard(1) == titan::Placement::shard(1));
    CHECK(!(titan::Placement::shard(0) == titan::Placement::shard(1)));
  }

  TEST_CASE("one process: groups of one rank where every collective is the identity") {
    titan::World world;  // not distributed: no network
    titan::DistRuntime runtime(world, titan::DistTimeouts{});
    titan::Comm& comm = runtime.world_group();
    CHECK(comm.size() == 1);
    CHECK(comm.rank() == 0);
    CHECK(comm.global_ranks() == std::vector<int>{0});

    at::Tensor input = at::arange(6, at::kFloat).reshape({2, 3});
    for (auto op : {titan::ReduceOp::sum, titan::ReduceOp::avg, titan::ReduceOp::max, titan::ReduceOp::min}) {
      at::Tensor tensor = input.clone();
      comm.all_reduce(tensor, op);
      CHECK(tensor.equal(input));
    }
    at::Tensor bf16 = input.to(at::kBFloat16);
    comm.all_reduce(bf16, titan::ReduceOp::avg);
    CHECK(bf16.equal(input.to(at::kBFloat16)));
    CHECK(comm.all_gather(input).equal(input));
    CHECK(comm.reduce_scatter(input, titan::ReduceOp::sum).equal(input));
    CHECK(comm.all_to_all(input).equal(input));
    at::Tensor copy = input.clone();
    comm.broadcast(copy, 0);
    CHECK(copy.equal(input));
    CHECK_THROWS_AS(comm.broadcast(copy, 1), titan::Error);
    comm.barrier();

    titan::DeviceMesh mesh(runtime, {});
    CHECK(mesh.describe() == "1 rank");
    for (const char* dim : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp", "dp_shard_cp_tp", "world"}) {
      CHECK_MESSAGE(mesh.size(dim) == 1, dim);
      CHECK_MESSAGE(mesh.coordinate(dim) == 0, dim);
      CHECK_MESSAGE(mesh.group(dim).size() == 1, dim);
    }
    CHECK_THROWS_AS(mesh.group("bogus"), titan::Error);
    CHECK_THROWS_AS((titan::DeviceMesh(runtime, {{"tp", 2}})), titan::Error);
  }
}
