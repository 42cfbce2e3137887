// The comm layer on real processes: titan_dist_checks (tests/multirank_programs) run
// as 2 to 4 ranks under `titan launch`, each check comparing collectives,
// observers, meshes, layouts and autograd collectives with their
// definitions. Several checks share one launch: each start costs ~0.7 s.
#include "doctest_torch.hpp"

#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

std::vector<std::string> split(const std::string& names) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= names.size()) {
    size_t comma = names.find(',', start);
    if (comma == std::string::npos) comma = names.size();
    if (comma > start) parts.push_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

// Runs the checks `names` ("a,b") on `ranks` processes with the store on
// `port` (one port per test case, so cases can run side by side), and
// expects every rank to report every check ok.
void run_checks(int ranks, int port, const std::string& names) {
  std::string command = "timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node " +
                        std::to_string(ranks) + " --master-port " + std::to_string(port) + " --grace-period-s 5 -- " +
                        titan::test::dist_checks_binary() + " " + names;
  auto result = titan::test::run_command(command);
  std::string missing;
  for (const auto& name : split(names)) {
    for (int rank = 0; rank < ranks; ++rank) {
      std::string line = "[rank " + std::to_string(rank) + "] CHECK " + name + " ok\n";
      if (result.output.find(line) == std::string::npos) missing += "  " + line;
    }
  }
  // One message with the whole output: it holds every rank's mismatches.
  std::string timed_out = result.exit_code == 124 ? " (timed out after 120 s)" : "";
  CHECK_MESSAGE(result.exit_code == 0, "exit code ", result.exit_code, timed_out, "\ncommand: ", command,
                "\nmissing lines:\n", missing, "output:\n", result.output);
  if (result.exit_code == 0) CHECK_MESSAGE(missing.empty(), "missing lines:\n", missing, "output:\n", result.output);
}

}  // namespace

TEST_SUITE("multirank") {
  TEST_CASE("multirank: on 2 ranks the collectives and the autograd collectives match their definitions") {
    // all_reduce, all_gather, reduce_scatter, broadcast, all_to_all (even and uneven splits),
    // send/recv, barrier, empty tensors; autograd forward and adjoint, TP
    // and SP MLPs against one process.
    run_checks(2, 29701, "collectives,autograd");
  }

  TEST_CASE("multirank: on 3 ranks the collectives and the autograd collectives match their definitions") {
    run_checks(3, 29702, "collectives,autograd");
  }

  // No ';' or ',' in test names: doctest_discover_tests would split them.
  TEST_CASE(
      "multirank: bad calls throw a titan::Error naming the group before reaching Gloo and observers "
      "see each collective with its sequence number and call site") {
    run_checks(2, 29703, "validation,observer");
  }

  TEST_CASE(
      "multirank: a dp_replicate=2 x dp_shard=2 mesh lays ranks out row-major and its groups hold "
      "exactly their slices") {
    run_checks(4, 29704, "mesh_hsdp");
  }

  TEST_CASE(
      "multirank: a dp_shard=2 x tp=2 mesh lays ranks out row-major and its groups hold exactly their "
      "slices and a plugin's ep x efsdp split of dp_shard has real groups of its own") {
    run_checks(4, 29705, "mesh_tp,mesh_ep");
  }

  TEST_CASE(
      "multirank: full_tensor reassembles Shard(0) with uneven rows (5 over 4 ranks) and Shard(1) "
      "and Partial and Replicate") {
    run_checks(4, 29706, "layout");
  }

  TEST_CASE("multirank: several device meshes can be built one after another in one process") {
    run_checks(4, 29707, "mesh_hsdp,mesh_tp,layout");
  }
}
