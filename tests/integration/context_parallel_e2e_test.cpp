// Context parallelism against the single-process reference (same seed, same
// data, fp32, 10 steps, sequences of 64 tokens) as real Gloo jobs: losses,
// grad norms and final parameters within 1e-5 relative for ring attention
// (both K/V rotations, both load balancers) at CP2 and CP4, Ulysses,
// FSDP2 x CP2 (and its checkpoint resumed in one process), CP2 x TP2, DDP x
// CP2 and CP2 with activation checkpointing; bad sizes refused before any
// weight exists.
#include "equivalence_runs.hpp"

namespace {

using titan::test::check_equivalent;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

// 4 heads and 4 kv heads: Ulysses and TP split them over up to 4 ranks.
using titan::test::kSmallModel;

std::string cp(int degree, const std::string& more = "") {
  return "{name: fsdp}, {name: context_parallel, context_parallel_degree: " + std::to_string(degree) + more + "}";
}
const std::string kAllToAll = ", context_parallel_rotate_method: alltoall";
const std::string kUnbalanced = ", context_parallel_load_balancer: none";

}  // namespace

TEST_CASE("context parallel: CP2 ring attention, both rotations and both load balancers, and Ulysses reproduce the "
          "single process") {
  RunOutput reference = run_single("cp2_reference", kSmallModel);
  // Every cp rank reads the whole batch (dp = 1) and trains on its piece.
  check_equivalent(run_ranks("cp2_allgather", 2, 29961, cp(2), kSmallModel, 1), reference, 1e-5);
  check_equivalent(run_ranks("cp2_alltoall", 2, 29962, cp(2, kAllToAll), kSmallModel, 1), reference, 1e-5);
  check_equivalent(run_ranks("cp2_allgather_unbalanced", 2, 29963, cp(2, kUnbalanced), kSmallModel, 1), reference, 1e-5);
  check_equivalent(run_ranks("cp2_alltoall_unbalanced", 2, 29964, cp(2, kAllToAll + kUnbalanced), kSmallModel, 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("cp2_ulysses", 2, 29965, cp(2, ", context_parallel_method: ulysses"), kSmallModel, 1),
                   reference, 1e-5);
}

TEST_CASE("context parallel: CP4 ring attention with both rotations and both load balancers reproduces the single "
          "process") {
  RunOutput reference = run_single("cp4_reference", kSmallModel);
  check_equivalent(run_ranks("cp4_allgather", 4, 29966, cp(4), kSmallModel, 1), reference, 1e-5);
  check_equivalent(run_ranks("cp4_alltoall", 4, 29967, cp(4, kAllToAll), kSmallModel, 1), reference, 1e-5);
  check_equivalent(run_ranks("cp4_alltoall_unbalanced", 4, 29968, cp(4, kAllToAll + kUnbalanced), kSmallModel, 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("cp4_allgather_unbalanced", 4, 29972, cp(4, kUnbalanced), kSmallModel, 1), reference, 1e-5);
}

TEST_CASE("context parallel: FSDP2 x CP2 (whose checkpoint resumes in one process), CP2 x TP2 (sequence and loss "
          "parallel), DDP x CP2 and CP2 with full activation checkpointing reproduce the single process") {
  RunOutput reference = run_single("cp_2d_reference", kSmallModel);
  // FSDP shards over dp_shard x cp = 4 ranks; two batches of 4 rows.
  const std::string checkpoints =
      " --set checkpoint.enable=true --set checkpoint.interval=5 --set checkpoint.keep_latest_k=0";
  RunOutput fsdp_cp = run_ranks("fsdp2_cp2", 4, 29969, "{name: fsdp, dp_shard: 2}, {name: context_parallel}",
                                kSmallModel + checkpoints, 2);
  check_equivalent(fsdp_cp, reference, 1e-5);
  // Its step-5 checkpoint (shards over dp_shard x cp) resumes in one
  // process on the same curve.
  namespace fs = std::filesystem;
  fs::path resumed = titan::test::temp_dir("fsdp2_cp2_resumed_alone");
  fs::create_directories(resumed / "checkpoint");
  fs::copy(titan::test::temp_path("fsdp2_cp2") / "checkpoint/step-5", resumed / "checkpoint/step-5",
           fs::copy_options::recursive);
  auto alone = run_command("timeout 300 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
                           "/configs/llama3_debugmodel.yaml --set training.local_batch_size=8" +
                           titan::test::common_sets(resumed) + kSmallModel + checkpoints);
  INFO(alone.output);
  REQUIRE(alone.exit_code == 0);
  CHECK(alone.output.find("resumed from checkpoint at step 5") != std::string::npos);
  RunOutput after = titan::test::read_run(resumed);
  REQUIRE(after.losses.size() == 5);
  double worst = 0;
  for (size_t i = 0; i < 5; ++i) worst = std::max(worst, titan::test::relative(after.losses[i], fsdp_cp.losses[5 + i]));
  MESSAGE("FSDP2 x CP2 -> one process: max relative loss difference over steps 6-10: " << worst);
  CHECK(worst <= 1e-5);

  check_equivalent(run_ranks("cp2_tp2", 4, 29970,
                             cp(2, kAllToAll) + ", {name: tensor_parallel, tensor_parallel_degree: 2}, "
                             "{name: loss_parallel}",
                             kSmallModel, 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("ddp_cp2", 2, 29971, "{name: ddp}, {name: context_parallel}", kSmallModel, 1), reference, 1e-5);
  // Activation checkpointing recomputes ring attention (and its exchanges) in backward.
  check_equivalent(run_ranks("cp2_full_ac", 2, 29973, cp(2, kAllToAll) + ", {name: activation_checkpoint, mode: full}",
                             kSmallModel, 1),
                   reference, 1e-5);
}

TEST_CASE("context parallel: sizes that do not split, and CP without a data-parallel plugin, are refused at config "
          "check with the key and what would work") {
  const std::string config = titan::test::source_dir() + "/configs/llama3_debugmodel_cp.yaml";
  auto check = [&](const std::string& sets, int world, const std::string& expected) {
    auto result = run_command(titan::test::titan_binary() + " config check " + config + " --world-size " +
                              std::to_string(world) + sets);
    INFO(result.output);
    CHECK(result.exit_code != 0);
    CHECK(result.output.find(expected) != std::string::npos);
  };
  check(" --set training.seq_len=66", 2,
        "training.seq_len = 66 is not divisible by 2 x context_parallel_degree 2 (head-tail chunks) = 4; use a "
        "multiple of 4");
  check(" --set training.seq_len=68 --set 'plugins=[{name: fsdp}, {name: context_parallel}, "
        "{name: tensor_parallel, tensor_parallel_degree: 2}]'",
        4, "x tensor_parallel_degree 2 (sequence parallelism) = 8; use a multiple of 8");
  check(" --set model.n_heads=6 --set model.dim=96 --set 'plugins=[{name: fsdp}, {name: context_parallel, "
        "context_parallel_degree: 4, context_parallel_method: ulysses}]'",
        4, "model.n_heads = 6 does not divide; use context_parallel_method: ring");
  check(" --set 'plugins=[{name: context_parallel}]'", 2, "mesh dim cp=2 needs a data-parallel plugin");
  check(" --set 'plugins=[{name: fsdp}, {name: context_parallel, context_parallel_load_balancer: zigzag}]'", 2,
        "context_parallel_load_balancer: expected one of {headtail, none}");
  for (const auto& [name, world] : std::vector<std::pair<std::string, int>>{{"llama3_debugmodel_cp.yaml", 2},
                                                                            {"llama3_8b_262k.yaml", 256}}) {
    auto ok = run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() + "/configs/" +
                          name + " --world-size " + std::to_string(world));
    CHECK_MESSAGE(ok.exit_code == 0, name, "\n", ok.output);
  }
}
