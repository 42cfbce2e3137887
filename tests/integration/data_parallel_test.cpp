// Data parallelism against the single-process reference (same seed, same
// data): FSDP on 2 and 4 ranks, HSDP 2x2 and DDP on 2 ranks, as real Gloo
// jobs started by `titan launch`. Losses per step and the final gathered
// parameters must agree within 1e-5 relative (per tensor, ‖a - b‖ / ‖b‖: an
// element-wise max is dominated by AdamW steps on near-zero gradients,
// whose sign flips on 1e-7 noise) in fp32; bf16 parameters stay
// within 1e-2 of the fp32 loss curve; FSDP's per-rank state is 1/N.
#include "equivalence_runs.hpp"

namespace {

using titan::test::check_equivalent;
using titan::test::kSmallModel;
using titan::test::relative;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

}  // namespace

TEST_CASE("data parallel: FSDP on 2 ranks reproduces the single process, with half the state per rank; every rank "
          "saves its metrics with metrics.save_for_all_ranks; prefetch off gives the same run") {
  RunOutput reference = run_single("dp_fsdp2_reference", kSmallModel);
  RunOutput fsdp = run_ranks("dp_fsdp2", 2, 29811, "{name: fsdp}",
                             kSmallModel + " --set metrics.save_for_all_ranks=true --set metrics.enable_tensorboard=true");
  check_equivalent(fsdp, reference, 1e-5);
  // Rank 0 holds the most rows; uneven splits pad nothing into the state.
  double share = fsdp.state_bytes.back() / reference.state_bytes.back();
  MESSAGE("FSDP x2 rank 0 state: " << fsdp.state_bytes.back() << " of " << reference.state_bytes.back() << " bytes");
  CHECK(share == doctest::Approx(0.5).epsilon(0.05));

  // The max over ranks is one rank's loss: the mean's on one process, at or
  // above it on two (whose halves of the batch differ).
  CHECK(reference.max_losses == reference.losses);
  bool above = false;
  for (size_t i = 0; i < fsdp.losses.size(); ++i) {
    CHECK(fsdp.max_losses[i] >= fsdp.losses[i]);
    above = above || fsdp.max_losses[i] > fsdp.losses[i] * (1 + 1e-6);
  }
  CHECK(above);
  // Rank 1's own file, the same steps and global loss as rank 0's; each
  // rank's TensorBoard folder.
  std::vector<nlohmann::json> rank1;
  std::istringstream lines(titan::test::read_file(fsdp.dump / "metrics.rank1.jsonl"));
  for (std::string line; std::getline(lines, line);) rank1.push_back(nlohmann::json::parse(line));
  REQUIRE(rank1.size() == fsdp.losses.size());
  for (size_t i = 0; i < rank1.size(); ++i) {
    CHECK(rank1[i]["step"].get<size_t>() == i + 1);
    CHECK(rank1[i]["loss_metrics/global_avg_loss"].get<double>() == fsdp.losses[i]);
  }
  CHECK(!std::filesystem::exists(fsdp.dump / "metrics.rank0.jsonl"));
  // Without prefetch each block is gathered only when it runs: the same numbers.
  RunOutput no_prefetch = run_ranks("dp_fsdp2_no_prefetch", 2, 29816, "{name: fsdp, prefetch: false}", kSmallModel);
  check_equivalent(no_prefetch, reference, 1e-5);
  for (const char* rank : {"rank_0", "rank_1"}) {
    CHECK_MESSAGE(!std::filesystem::is_empty(fsdp.dump / "tb" / rank), rank);
  }
}

TEST_CASE("data parallel: FSDP on 4 ranks (reshard never) reproduces the single process, with a quarter of the state") {
  RunOutput reference = run_single("dp_fsdp4_reference", kSmallModel);
  RunOutput fsdp = run_ranks("dp_fsdp4", 4, 29821, "{name: fsdp, reshard_after_forward: never}", kSmallModel);
  check_equivalent(fsdp, reference, 1e-5);
  double share = fsdp.state_bytes.back() / reference.state_bytes.back();
  CHECK(share == doctest::Approx(0.25).epsilon(0.05));
}

TEST_CASE("data parallel: HSDP 2x2 reproduces the single process") {
  RunOutput reference = run_single("dp_hsdp_reference", kSmallModel);
  RunOutput hsdp = run_ranks("dp_hsdp", 4, 29831, "{name: fsdp, dp_replicate: 2}", kSmallModel);
  check_equivalent(hsdp, reference, 1e-5);
  double share = hsdp.state_bytes.back() / reference.state_bytes.back();
  CHECK(share == doctest::Approx(0.5).epsilon(0.05));
}

TEST_CASE("data parallel: DDP on 2 ranks reproduces the single process, gradient accumulation included") {
  RunOutput reference = run_single("dp_ddp_reference", kSmallModel + " --set training.global_batch_size=16");
  RunOutput ddp = run_ranks("dp_ddp", 2, 29841, "{name: ddp, bucket_cap_mb: 0.5}", kSmallModel + " --set training.global_batch_size=16");
  check_equivalent(ddp, reference, 1e-5);
}

TEST_CASE("data parallel: FSDP with bf16 parameters / fp32 reduce stays within 1e-2 of the fp32 loss curve") {
  RunOutput fp32 = run_ranks("dp_bf16_reference", 2, 29851, "{name: fsdp}", kSmallModel);
  RunOutput bf16 = run_ranks("dp_bf16", 2, 29856, "{name: fsdp}", kSmallModel + " --set training.mixed_precision_param=bfloat16");
  double worst = 0;
  for (size_t i = 0; i < fp32.losses.size(); ++i) worst = std::max(worst, relative(bf16.losses[i], fp32.losses[i]));
  MESSAGE("bf16 vs fp32 loss: max relative difference " << worst);
  CHECK(worst <= 1e-2);
  CHECK(worst > 0);  // bf16 really ran
}

TEST_CASE("data parallel: degrees that do not fit the world fail on every rank with a clear message") {
  auto dump = titan::test::temp_dir("dp_bad_degrees");
  auto result = run_command("timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29861 -- " +
                            titan::test::titan_binary() + " train " + titan::test::source_dir() +
                            "/configs/llama3_debugmodel.yaml --set 'plugins=[{name: fsdp, dp_shard: 4}]'" +
                            " --set job.dump_folder=" + dump.string());
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("multiply to 4 but the world size is 2") != std::string::npos);
  auto none = run_command("timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29866 -- " +
                          titan::test::titan_binary() + " train " + titan::test::source_dir() +
                          "/configs/llama3_debugmodel.yaml --set job.dump_folder=" + dump.string());
  INFO(none.output);
  CHECK(none.exit_code != 0);
  CHECK(none.output.find("add a data-parallel plugin") != std::string::npos);
}

TEST_CASE("data parallel: FSDP builds a shrunken-depth 8B on 4 ranks without any rank holding the whole model") {
  auto dump = titan::test::temp_dir("dp_8b_memory");
  auto result = run_command("timeout 600 " + titan::test::titan_binary() +
                            " launch --nproc-per-node 4 --master-port 29871 -- " + titan::test::titan_binary() +
                            " train " + titan::test::source_dir() +
                            "/configs/llama3_debugmodel.yaml --set model.flavor=8B --set model.n_layers=2"
                            " --set training.threads=1 --set debug.exit_after_init=true --set 'plugins=[{name: fsdp}]'"
                            " --set job.dump_folder=" + dump.string());
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // "... 448.06M parameters ... this rank holds 427.3 MiB of them, peak resident 826.7 MiB after init"
  std::istringstream lines(result.output);
  int ranks_seen = 0;
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("M parameters");
    if (at == std::string::npos) continue;
    double params = std::stod(line.substr(line.rfind(' ', at - 1) + 1));
    double whole_mib = params * 1e6 * 4 / 1048576.0;
    double held = std::stod(line.substr(line.find("holds ") + 6));
    double peak = std::stod(line.substr(line.find("peak resident ") + 14));
    CAPTURE(line);
    CHECK(held == doctest::Approx(whole_mib / 4).epsilon(0.05));
    CHECK(peak < 0.75 * whole_mib);  // shards + one parameter's init buffer + LibTorch itself
    ++ranks_seen;
  }
  CHECK(ranks_seen == 4);
}

TEST_CASE("data parallel: a rank killed mid-run makes titan launch fail fast, naming it, leaving no process") {
  auto dump = titan::test::temp_dir("dp_killed_rank");
  auto start = std::chrono::steady_clock::now();
  auto result = run_command("timeout 300 " + titan::test::titan_binary() +
                            " launch --nproc-per-node 2 --master-port 29876 --grace-period-s 5 -- " +
                            titan::test::titan_binary() + " train " + titan::test::source_dir() +
                            "/configs/llama3_debugmodel.yaml --set training.local_batch_size=4 --set training.seq_len=32"
                            " --set training.threads=1 --set 'plugins=[{name: fsdp}]' --set debug.crash_rank=1"
                            " --set debug.crash_at_step=2 --set job.dump_folder=" + dump.string());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("rank 1") != std::string::npos);
  CHECK(result.output.find("SIGKILL") != std::string::npos);
  CHECK(seconds < 120);
  auto leftovers = run_command("ps -eo args | grep '[t]itan train .*dp_killed_rank'");
  CHECK(leftovers.output.empty());
}

TEST_CASE("data parallel: the same FSDP run works under PyTorch's torchrun (its agent hosts the store)") {
  // torch 2.11's torchrun, from the environment scripts/setup.sh made.
  const std::string torchrun = titan::test::source_dir() + "/.venv/bin/torchrun";
  if (run_command("test -x " + torchrun).exit_code != 0) {
    MESSAGE("TITAN_SKIPPED: " << torchrun << " not found (scripts/setup.sh installs it)");
    return;
  }
  auto dump = titan::test::temp_dir("dp_torchrun");
  auto result = run_command("cd " + dump.string() + " && timeout 300 " + torchrun +
                            " --nproc_per_node 2 --master_port 29881 --no-python " + titan::test::titan_binary() +
                            " train " +
                            titan::test::source_dir() + "/configs/llama3_debugmodel_fsdp.yaml --set training.steps=2"
                            " --set metrics.log_freq=1 --set training.seq_len=32 --set job.dump_folder=" + dump.string());
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("joined 2 ranks (torchrun)") != std::string::npos);
  CHECK(titan::test::read_file(dump / "metrics.jsonl").find("\"step\":2") != std::string::npos);
}
