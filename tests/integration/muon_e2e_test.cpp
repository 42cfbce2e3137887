// Muon under FSDP and TP as real Gloo jobs against one process (same seed,
// same data, the Newton-Schulz iteration in float32): each sharded matrix is
// gathered, orthogonalized whole by one rank and broadcast, so the parallel
// runs reproduce the single process; the flight recorder shows one
// orthogonalization's collectives per matrix and step; an FSDP checkpoint
// (momentum buffers sharded like their parameters) resumes in one process.
// Against PyTorch's torch.optim.Muon: pytorch_reference_test.cpp.
#include "equivalence_runs.hpp"

#include <map>

namespace {

namespace fs = std::filesystem;
using titan::test::check_equivalent;
using titan::test::RunOutput;
using titan::test::run_ranks;
using titan::test::run_single;

// Muon for the blocks' matrices; the iteration in float32 so that the
// parallel runs can be held to the single process within 1e-5.
const std::string kMuon = titan::test::kSmallModel +
                          " --set optimizer.name=muon --set optimizer.lr=0.02 --set optimizer.ns_dtype=float32";

// Step 2's collectives named "muon orthogonalize <param>" in each rank's
// flight recorder dump: how many of each op per matrix.
std::map<std::string, std::map<std::string, int>> muon_collectives(const fs::path& dump, int rank) {
  const auto file = dump / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json");
  REQUIRE(fs::exists(file));
  std::map<std::string, std::map<std::string, int>> calls;  // param -> op -> count
  const nlohmann::json recorded = nlohmann::json::parse(titan::test::read_file(file));
  for (const auto& entry : recorded["entries"]) {
    const std::string site = entry["call_site"];
    const auto muon = site.find("muon orthogonalize ");
    if (site.rfind("step 2 /", 0) != 0 || muon == std::string::npos) continue;
    ++calls[site.substr(muon + 19)][entry["op"].get<std::string>()];
  }
  return calls;
}

}  // namespace

TEST_CASE("muon: FSDP 2, TP 2 and FSDP 2 x TP 2 reproduce the single process, each matrix orthogonalized whole by "
          "one rank a step") {
  const RunOutput reference = run_single("muon_single", kMuon);
  const std::string recorder = ", {name: flight_recorder, dump_on_exit: true}";
  const RunOutput fsdp = run_ranks("muon_fsdp2", 2, 29485, "{name: fsdp}" + recorder, kMuon);
  check_equivalent(fsdp, reference, 1e-5);
  check_equivalent(run_ranks("muon_tp2", 2, 29486, "{name: tensor_parallel, tensor_parallel_degree: 2}", kMuon, 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("muon_fsdp2_tp2", 4, 29487,
                             "{name: fsdp, dp_shard: 2}, {name: tensor_parallel, tensor_parallel_degree: 2}", kMuon, 2),
                   reference, 1e-5);
  // Under FSDP each of the 2 blocks' 7 matrices is all-gathered and then
  // broadcast once from its owner; the embedding and the head (AdamW) never are.
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto calls = muon_collectives(fsdp.dump, rank);
    CHECK(calls.size() == 14);
    for (const auto& [param, ops] : calls) {
      INFO(param);
      CHECK(param.find("tok_embeddings") == std::string::npos);
      CHECK(param.find("output") == std::string::npos);
      CHECK(ops.at("broadcast") == 1);
      CHECK(ops.at("all_gather") == 1);
    }
  }
}

TEST_CASE("muon: an FSDP 2 checkpoint (momentum buffers sharded like their parameters) resumes in one process on "
          "the same curve, and bad options are config errors naming the key") {
  // FSDP 2 for 10 steps, a checkpoint every 3; then every checkpoint but
  // step 3's removed and the job resumed in one process: steps 4-10.
  const std::string every_3 = " --set checkpoint.enable=true --set checkpoint.interval=3 --set checkpoint.keep_latest_k=0";
  const RunOutput straight = run_ranks("muon_fsdp2_saved", 2, 29488, "{name: fsdp}", kMuon + every_3);
  const fs::path dump = straight.dump;
  REQUIRE(fs::exists(dump / "checkpoint" / "step-3"));
  for (const auto& entry : fs::directory_iterator(dump / "checkpoint")) {
    if (entry.path().filename() != "step-3") fs::remove_all(entry.path());
  }
  fs::remove(dump / "metrics.jsonl");
  auto resumed = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                          titan::test::source_dir() +
                                          "/configs/llama3_debugmodel.yaml --set training.local_batch_size=8" +
                                          titan::test::common_sets(dump) + kMuon + every_3);
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(titan::test::has(resumed.output, "resumed from checkpoint at step 3"));
  const RunOutput after = titan::test::read_run(dump);
  REQUIRE(after.losses.size() == 7);
  for (size_t i = 0; i < after.losses.size(); ++i) {
    CAPTURE(i + 4);
    CHECK(titan::test::relative(after.losses[i], straight.losses[i + 3]) <= 1e-5);
  }

  auto bad = [](const std::string& sets) {
    return titan::test::run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() +
                                    "/configs/llama3_debugmodel.yaml --set optimizer.name=muon" + sets);
  };
  auto steps = bad(" --set optimizer.ns_steps=100");
  CHECK(steps.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(steps.output, "optimizer.ns_steps: expected an integer from 1 to 99, got 100"),
                steps.output);
  auto coefficients = bad(" --set 'optimizer.ns_coefficients=[3.4, -4.7]'");
  CHECK(coefficients.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(coefficients.output, "optimizer.ns_coefficients: expected 3 numbers"),
                coefficients.output);
  auto adjust = bad(" --set optimizer.adjust_lr_fn=spectral");
  CHECK(adjust.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(adjust.output, "optimizer.adjust_lr_fn"), adjust.output);
}
