// Tensor, sequence and loss parallelism, alone and with FSDP (2-D), against
// the single-process reference (same seed, same data, fp32, 10 steps) as
// real Gloo jobs: losses, grad norms and final parameters within 1e-5
// relative; per-rank state the expected share; invalid degrees refused
// before any weight exists; checkpoints moving between layouts.
#include "equivalence_runs.hpp"

#include <set>

namespace {

namespace fs = std::filesystem;
using titan::test::check_equivalent;
using titan::test::relative;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

// 4 heads and 4 kv heads: Ulysses and TP split them over up to 4 ranks.
using titan::test::kSmallModel;

std::string tp(int degree, const std::string& more = "") {
  return "{name: tensor_parallel, tensor_parallel_degree: " + std::to_string(degree) + more + "}";
}
const std::string kLossParallel = "{name: loss_parallel}";

// The share of the reference's state one rank should hold: each parameter
// divided by the ranks splitting it (norms are whole under TP alone).
double expected_share(const RunOutput& reference, int tp_degree, int fsdp_degree) {
  double held = 0, total = 0;
  for (const auto& item : reference.params) {
    double numel = static_cast<double>(item.value().numel());
    bool norm = item.key().find("norm") != std::string::npos;
    held += numel / (norm ? 1 : tp_degree) / fsdp_degree;
    total += numel;
  }
  return held / total;
}

void check_share(const RunOutput& run, const RunOutput& reference, double expected, const std::string& what) {
  double share = run.state_bytes.back() / reference.state_bytes.back();
  MESSAGE(what << ": rank 0 holds " << share << " of the single process's parameter + optimizer bytes (expected "
               << expected << ")");
  CHECK(share == doctest::Approx(expected).epsilon(0.05));
}

}  // namespace

TEST_CASE("tensor parallel: TP2 with sequence and loss parallel, and TP2 without SP, reproduce the single process") {
  RunOutput reference = run_single("tp2_reference", kSmallModel);
  RunOutput sp = run_ranks("tp2_sp", 2, 29601, tp(2) + ", " + kLossParallel, kSmallModel, /*dp=*/1);
  check_equivalent(sp, reference, 1e-5);
  check_share(sp, reference, expected_share(reference, 2, 1), "TP2");
  RunOutput no_sp = run_ranks("tp2_no_sp", 2, 29606, tp(2, ", enable_sequence_parallel: false") + ", " + kLossParallel,
                              kSmallModel, 1);
  check_equivalent(no_sp, reference, 1e-5);
}

TEST_CASE("tensor parallel: TP4, and TP2 without loss parallel (logits gathered), reproduce the single process") {
  RunOutput reference = run_single("tp4_reference", kSmallModel);
  RunOutput tp4 = run_ranks("tp4", 4, 29611, tp(4) + ", " + kLossParallel, kSmallModel, 1);
  check_equivalent(tp4, reference, 1e-5);
  check_share(tp4, reference, expected_share(reference, 4, 1), "TP4");
  RunOutput gathered = run_ranks("tp2_gathered_loss", 2, 29616, tp(2), kSmallModel, 1);
  check_equivalent(gathered, reference, 1e-5);
}

TEST_CASE("tensor parallel: FSDP2 x TP2 and HSDP 2 x (FSDP1 x TP2) on 4 ranks reproduce the single process") {
  RunOutput reference = run_single("fsdp_tp_reference", kSmallModel);
  RunOutput fsdp_tp = run_ranks("fsdp2_tp2", 4, 29621, "{name: fsdp}, " + tp(2) + ", " + kLossParallel, kSmallModel, 2);
  check_equivalent(fsdp_tp, reference, 1e-5);
  check_share(fsdp_tp, reference, 0.25, "FSDP2 x TP2");
  RunOutput hsdp_tp = run_ranks("hsdp_tp2", 4, 29626,
                                "{name: fsdp, dp_replicate: 2, dp_shard: 1}, " + tp(2) + ", " + kLossParallel, kSmallModel, 2);
  check_equivalent(hsdp_tp, reference, 1e-5);
}

TEST_CASE("tensor parallel: async TP2 (chunked all-gather / reduce-scatter matmuls) reproduces the single process") {
  RunOutput reference = run_single("async_tp_reference", kSmallModel);
  RunOutput async = run_ranks("async_tp2", 2, 29631, tp(2, ", enable_async_tensor_parallel: true") + ", " + kLossParallel,
                              kSmallModel, 1);
  check_equivalent(async, reference, 1e-5);
}

TEST_CASE("loss parallel: equals the whole-logits loss and gradient, and never holds the whole logits") {
  auto result = run_command("timeout 300 " + titan::test::titan_binary() +
                            " launch --nproc-per-node 2 --master-port 29636 -- " + titan::test::tp_checks_binary());
  MESSAGE(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("CHECK tp_loss ok") != std::string::npos);
}

TEST_CASE("tensor parallel: invalid degrees are refused with the key, the value and what would work") {
  const std::string config = titan::test::source_dir() + "/configs/llama3_debugmodel_tp.yaml";
  auto check = [&](const std::string& sets, int world, const std::string& expected) {
    auto result = run_command(titan::test::titan_binary() + " config check " + config + " --world-size " +
                              std::to_string(world) + sets);
    INFO(result.output);
    CHECK(result.exit_code != 0);
    CHECK(result.output.find(expected) != std::string::npos);
  };
  const std::string tp4 = " --set 'plugins=[{name: tensor_parallel, tensor_parallel_degree: 4}]'";
  check(tp4 + " --set model.n_heads=6 --set model.dim=96", 4,
        "model.n_heads: attention heads = 6 is not divisible by tensor_parallel_degree 4; use a degree dividing 6 (e.g. 3)");
  check(tp4 + " --set model.n_heads=8 --set model.n_kv_heads=2", 4, "model.n_kv_heads: key/value heads = 2");
  check(tp4 + " --set training.seq_len=66", 4, "training.seq_len = 66 is not divisible by tensor_parallel_degree 4");
  check(" --set 'plugins=[{name: tensor_parallel, tensor_parallel_degree: 3}]'", 4,
        "multiply to 3 but the world size is 4");
  check(" --set 'plugins=[{name: tensor_parallel, enable_sequence_parallel: false, enable_async_tensor_parallel: true}]'",
        2, "enable_async_tensor_parallel");
  // The same refusal under `titan train`, before the model is built.
  auto dump = titan::test::temp_dir("tp_bad_heads");
  auto result = run_command("timeout 120 " + titan::test::titan_binary() +
                            " launch --nproc-per-node 2 --master-port 29641 -- " + titan::test::titan_binary() +
                            " train " + config + " --set model.n_heads=6 --set model.dim=96 --set model.n_kv_heads=3" +
                            " --set job.dump_folder=" + dump.string());
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("model.n_kv_heads: key/value heads = 3 is not divisible by tensor_parallel_degree 2") !=
        std::string::npos);
  CHECK(result.output.find("this rank holds") == std::string::npos);  // no model was materialized
  // Valid configs pass with their world sizes.
  for (const auto& [name, world] : std::vector<std::pair<std::string, int>>{{"llama3_debugmodel_tp.yaml", 2},
                                                                            {"llama3_debugmodel_fsdp_tp.yaml", 4},
                                                                            {"llama3_70b.yaml", 256}}) {
    auto ok = run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() + "/configs/" +
                          name + " --world-size " + std::to_string(world));
    CHECK_MESSAGE(ok.exit_code == 0, name, "\n", ok.output);
  }
}

TEST_CASE("tensor parallel + dcp: an FSDP4 checkpoint resumes under FSDP2 x TP2 on the same curve; its save loads "
          "bit-exactly under TP4 and one process") {
  const std::string checkpoints =
      kSmallModel + " --set checkpoint.enable=true --set checkpoint.interval=5 --set checkpoint.keep_latest_k=0";
  RunOutput fsdp4 = run_ranks("tp_dcp_fsdp4", 4, 29646, "{name: fsdp}", checkpoints);
  // Resume step 5 of the FSDP4 run under FSDP2 x TP2 and train to step 10.
  fs::path resumed_dump = titan::test::temp_dir("tp_dcp_fsdp2_tp2");
  fs::create_directories(resumed_dump / "checkpoint");
  fs::copy(titan::test::temp_path("tp_dcp_fsdp4") / "checkpoint/step-5", resumed_dump / "checkpoint/step-5",
           fs::copy_options::recursive);
  auto launch = [&](const fs::path& dump, int ranks, int port, const std::string& plugins, int dp) {
    return run_command("timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node " +
                       std::to_string(ranks) + " --master-port " + std::to_string(port) + " -- " +
                       titan::test::titan_binary() + " train " + titan::test::source_dir() +
                       "/configs/llama3_debugmodel.yaml --set training.local_batch_size=" + std::to_string(8 / dp) +
                       " --set 'plugins=[" + plugins + "]'" + titan::test::common_sets(dump) + checkpoints);
  };
  auto resumed = launch(resumed_dump, 4, 29651, "{name: fsdp}, " + tp(2) + ", " + kLossParallel, 2);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resumed from checkpoint at step 5") != std::string::npos);
  RunOutput after = titan::test::read_run(resumed_dump);
  REQUIRE(after.losses.size() == 5);
  double worst = 0;
  for (size_t i = 0; i < 5; ++i) worst = std::max(worst, relative(after.losses[i], fsdp4.losses[5 + i]));
  MESSAGE("FSDP4 -> FSDP2 x TP2: max relative loss difference over steps 6-10: " << worst);
  CHECK(worst <= 1e-5);
  // Its step-10 checkpoint, loaded under TP4 and by one process with no
  // step left to train, gives back exactly its final parameters.
  const std::string saved = titan::test::read_file(resumed_dump / "final.pt");
  for (const auto& [name, ranks, plugins] :
       std::vector<std::tuple<std::string, int, std::string>>{{"tp4", 4, tp(4)}, {"single", 1, ""}}) {
    fs::path dump = titan::test::temp_dir("tp_dcp_load_" + name);
    fs::create_directories(dump / "checkpoint");
    fs::copy(resumed_dump / "checkpoint/step-10", dump / "checkpoint/step-10", fs::copy_options::recursive);
    auto loaded = ranks == 1 ? run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                           titan::test::source_dir() + "/configs/llama3_debugmodel.yaml" +
                                           titan::test::common_sets(dump) + checkpoints)
                             : launch(dump, ranks, 29656, plugins, 1);
    INFO(loaded.output);
    REQUIRE(loaded.exit_code == 0);
    CHECK(loaded.output.find("resumed from checkpoint at step 10") != std::string::npos);
    CHECK_MESSAGE(titan::test::read_file(dump / "final.pt") == saved, name);
  }
}

TEST_CASE("tensor parallel: the flight recorder sees every TP collective under its layer's name, forward and backward") {
  auto dump = titan::test::temp_dir("tp_flight_recorder");
  auto result = run_command(
      "timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29661 -- " +
      titan::test::titan_binary() + " train " + titan::test::source_dir() + "/configs/llama3_debugmodel_tp.yaml" +
      kSmallModel + " --set model.n_layers=1 --set training.steps=1 --set training.seq_len=32 --set job.dump_folder=" +
      dump.string() + " --set 'plugins=[" + tp(2) + ", " + kLossParallel +
      ", {name: flight_recorder, dump_on_exit: true}]'");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  auto json = nlohmann::json::parse(titan::test::read_file(dump / "flight_recorder/rank_0.json"));
  std::set<std::string> sites;
  for (const auto& entry : json["entries"]) {
    std::string site = entry["call_site"];
    sites.insert(site.substr(site.find(" / ") == std::string::npos ? 0 : site.find(" / ") + 3));
  }
  for (const char* expected :
       {"tp reduce_scatter tok_embeddings", "tp reduce_scatter tok_embeddings (backward)",
        "tp all_gather layers.0.attention_norm", "tp all_gather layers.0.attention_norm (backward)",
        "tp reduce_scatter layers.0.attention.wo", "tp reduce_scatter layers.0.feed_forward.w2 (backward)",
        "tp all_reduce layers.0.ffn_norm.weight grad", "tp all_gather norm", "loss_parallel all_reduce max"}) {
    CHECK_MESSAGE(sites.count(expected) == 1, expected);
  }
}
