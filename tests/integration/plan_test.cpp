// `titan plan CONFIG --world-size N`, the dry run, against the real thing:
// each rank's predicted peak memory against the CPU memory tracker of a
// real run of the same config (metrics.save_for_all_ranks), its step's
// collectives against what the flight recorder recorded, and a broken
// parallelizer refused before launch, by name.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using titan::test::has;
using titan::test::run_command;

// The debug model at a small shape, 2 steps (the second is measured).
std::string small_run_sets(const std::filesystem::path& dump) {
  return " --set training.steps=2 --set training.seq_len=32 --set training.local_batch_size=2"
         " --set training.threads=1 --set metrics.log_freq=1 --set metrics.enable_jsonl=true"
         " --set metrics.save_for_all_ranks=true --set job.dump_folder=" + dump.string();
}

std::string config_path(const std::string& name) { return titan::test::source_dir() + "/configs/" + name; }

nlohmann::json dry_run(int ranks, const std::string& config, const std::string& sets) {
  auto result = run_command("timeout 300 " + titan::test::titan_binary() + " plan " + config + " --world-size " +
                            std::to_string(ranks) + " --json" + sets + " 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.output);
}

// The peak of live CPU allocator bytes in step 2 on `rank`, in bytes.
double measured_peak(const std::filesystem::path& dump, int rank) {
  // Rank 0 writes metrics.jsonl, the others metrics.rank<r>.jsonl.
  const std::string file = rank == 0 ? "metrics.jsonl" : "metrics.rank" + std::to_string(rank) + ".jsonl";
  std::istringstream lines(titan::test::read_file(dump / file));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["step"] == 2) return record["memory/max_active(GiB)"].get<double>() * 1024.0 * 1024.0 * 1024.0;
  }
  FAIL("no step 2 in rank " << rank << "'s metrics");
  return 0;
}

// What identifies a collective across the two records: op, group, shapes,
// dtype, bytes and peer.
std::vector<std::string> signatures(const nlohmann::json& events, const std::string& step_prefix) {
  std::vector<std::string> result;
  for (const auto& event : events) {
    if (event["call_site"].get<std::string>().rfind(step_prefix, 0) != 0) continue;
    result.push_back(event["op"].get<std::string>() + " " + event["group"].get<std::string>() + " " +
                     event["shapes"].dump() + " " + event["dtype"].get<std::string>() + " " +
                     std::to_string(event["bytes"].get<int64_t>()) + " peer " +
                     std::to_string(event.value("peer", -1)));
  }
  return result;
}

// A real run under titan launch (or alone), then the dry run of the same
// config: every rank's peak within 5% (the issue asks 10%; the dry run
// runs the same code, so what differs is what it does not simulate: the
// Gloo backend's own staging buffers, about 1 MiB a collective here), and,
// with the flight recorder on, step 2's collectives equal.
void check_against_real_run(const std::string& name, int ranks, int port, const std::string& config,
                            const std::string& sets) {
  const auto dump = titan::test::temp_dir("plan_" + name);
  const std::string train = titan::test::titan_binary() + " train " + config + small_run_sets(dump) + sets;
  const std::string command =
      ranks == 1 ? train
                 : titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) +
                       " --master-port " + std::to_string(port) + " -- " + train;
  auto real = run_command("timeout 300 " + command + " 2>&1");
  INFO(real.output);
  REQUIRE(real.exit_code == 0);
  const nlohmann::json plan = dry_run(ranks, config, small_run_sets(dump) + sets);
  REQUIRE(plan["ranks"].size() == static_cast<size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    const nlohmann::json& predicted = plan["ranks"][rank];
    const double measured = measured_peak(dump, rank);
    const double peak = predicted["peak_bytes"].get<double>();
    INFO(name << " rank " << rank << ": predicted " << peak / 1048576 << " MiB, measured " << measured / 1048576
              << " MiB, at " << predicted["peak_at"]);
    CHECK(std::abs(peak - measured) / measured < 0.05);
    CHECK(predicted["flops"].get<double>() > 0);
    const auto recorder = dump / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json");
    if (!std::filesystem::exists(recorder)) continue;
    const auto recorded = signatures(nlohmann::json::parse(titan::test::read_file(recorder))["entries"], "step 2");
    const auto planned = signatures(predicted["collectives"], "step 2");
    CHECK(!recorded.empty());
    CHECK(planned == recorded);
  }
}

}  // namespace

TEST_CASE("titan plan: an FSDP run on 2 ranks is predicted per rank: peak memory within 5% and every collective of "
          "the step as the flight recorder records it") {
  check_against_real_run("fsdp", 2, 29611, config_path("llama3_debugmodel.yaml"),
                         " --set 'plugins=[{name: fsdp}, {name: flight_recorder, dump_on_exit: true}]'");
}

TEST_CASE("titan plan: a pipelined run (Interleaved1F1B over 2 ranks) is predicted: peak memory and every send and "
          "receive of the step") {
  check_against_real_run("pp", 2, 29613, config_path("llama3_debugmodel_pp.yaml"),
                         " --set 'plugins=[{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: "
                         "Interleaved1F1B}, {name: flight_recorder, dump_on_exit: true}]'");
}

TEST_CASE("titan plan: full activation checkpointing on one process: peak memory, and the recompute counted as FLOPs") {
  check_against_real_run("ac_full", 1, 0, config_path("llama3_debugmodel.yaml"),
                         " --set 'plugins=[{name: activation_checkpoint, mode: full}]'");
  const auto dump = titan::test::temp_dir("plan_ac_full_flops");
  const nlohmann::json plan = dry_run(1, config_path("llama3_debugmodel.yaml"),
                                      small_run_sets(dump) + " --set 'plugins=[{name: activation_checkpoint, mode: full}]'");
  const double flops = plan["ranks"][0]["flops"], recompute = plan["ranks"][0]["recompute_flops"];
  // The forward is a third of forward + backward; full AC runs it again.
  CHECK(recompute / (flops - recompute) == doctest::Approx(1.0 / 3.0).epsilon(0.05));
}

TEST_CASE("titan plan: a run with the fused AdamW is planned (its kernel has a shape on meta), its state counted") {
  const auto dump = titan::test::temp_dir("plan_fused_adamw");
  const nlohmann::json plan = dry_run(1, config_path("llama3_debugmodel.yaml"),
                                      small_run_sets(dump) + " --set optimizer.implementation=fused");
  const auto& rank = plan["ranks"][0];
  // Two moments like the parameters, and a step count per parameter.
  CHECK(rank["optimizer_bytes"].get<int64_t>() > 2 * rank["parameter_bytes"].get<int64_t>());
}

TEST_CASE("titan plan: block-causal attention with first_fit packing is planned on meta tensors under CP ring "
          "attention and per-op activation checkpointing (every mask op has a meta kernel)") {
  const auto dump = titan::test::temp_dir("plan_block_causal");
  const std::string sets = small_run_sets(dump) + " --set model.attn_mask_type=block_causal"
                                                  " --set training.packing=first_fit";
  const nlohmann::json cp = dry_run(2, config_path("llama3_debugmodel_cp.yaml"), sets);
  CHECK(cp["ranks"].size() == 2);
  const nlohmann::json op = dry_run(
      1, config_path("llama3_debugmodel.yaml"),
      sets + " --set 'plugins=[{name: activation_checkpoint, mode: selective, selective_ac_option: op}]'");
  CHECK(op["ranks"].size() == 1);
}

TEST_CASE("titan plan: no layout's step makes the host wait for a GPU (a copy from host memory without non_blocking, "
          "counted on meta): one process with full AC and float8, DDP, FSDP x async TP x loss parallel, HSDP, PP x "
          "FSDP, PP ZBVZeroBubble, CP ring and Ulysses over block-causal documents, fused kernels") {
  struct Layout {
    std::string name;
    int ranks;
    std::string config, sets;
  };
  const std::string documents = " --set model.attn_mask_type=block_causal --set training.packing=first_fit";
  const std::vector<Layout> layouts = {
      {"one_ac_float8", 1, "llama3_debugmodel.yaml",
       " --set 'plugins=[{name: activation_checkpoint, mode: full}, {name: float8}]'"},
      {"ddp", 2, "llama3_debugmodel_ddp.yaml", ""},
      {"fsdp_tp_lp", 4, "llama3_debugmodel.yaml",
       " --set 'plugins=[{name: fsdp, dp_shard: 2}, {name: tensor_parallel, tensor_parallel_degree: 2, "
       "enable_async_tensor_parallel: true}, {name: loss_parallel}]'"},
      {"hsdp", 4, "llama3_debugmodel_hsdp.yaml", ""},
      {"pp_fsdp", 4, "llama3_debugmodel.yaml",
       " --set 'plugins=[{name: fsdp, dp_shard: 2}, {name: pipeline, pipeline_parallel_degree: 2, "
       "pipeline_parallel_microbatch_size: 1}]'"},
      {"pp_zbv", 2, "llama3_debugmodel.yaml",
       " --set 'plugins=[{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: ZBVZeroBubble, "
       "num_pp_microbatches: 2}]'"},
      {"cp_ring_documents", 2, "llama3_debugmodel_cp.yaml", documents},
      {"cp_ulysses_documents", 2, "llama3_debugmodel.yaml",
       documents + " --set 'plugins=[{name: fsdp, dp_shard: 1}, {name: context_parallel, context_parallel_degree: 2, "
                   "context_parallel_method: ulysses}]'"},
      {"fused_kernels", 1, "llama3_debugmodel.yaml", " --set 'plugins=[{name: fused_kernels}]'"},
  };
  for (const auto& layout : layouts) {
    INFO(layout.name);
    const auto dump = titan::test::temp_dir("plan_host_waits_" + layout.name);
    const nlohmann::json plan = dry_run(layout.ranks, config_path(layout.config), small_run_sets(dump) + layout.sets);
    for (const auto& rank : plan["ranks"]) {
      INFO("rank " << rank["rank"] << ": " << rank["host_wait_sites"].dump());
      CHECK(rank["host_waits"].get<int64_t>() == 0);
    }
  }
}

namespace {

// The dry run at 2 ranks of FSDP plus a broken test plugin: its exit status
// and output.
titan::test::CommandResult plan_with_test_plugin(const std::string& plugin) {
  const std::string sets = " --set job.plugin_path=[" + std::string(titan::test::paths::test_plugin_dir) +
                           "] --set 'plugins=[{name: fsdp}, {name: " + plugin + "}]'";
  return run_command("timeout 120 " + titan::test::titan_binary() + " plan " + config_path("llama3_debugmodel.yaml") +
                     " --world-size 2" + sets + " 2>&1");
}

}  // namespace

TEST_CASE("titan plan: the checkpoint's save plan writes each piece once: DDP's whole copies by rank 0 alone, FSDP's "
          "shards by their own ranks") {
  const auto dump = titan::test::temp_dir("plan_checkpoint");
  for (const std::string plugin : {"ddp", "fsdp"}) {
    const nlohmann::json plan =
        dry_run(2, config_path("llama3_debugmodel.yaml"), small_run_sets(dump) + " --set 'plugins=[{name: " + plugin + "}]'");
    const auto& ranks = plan["ranks"];
    INFO(plugin << ": " << ranks[0]["checkpoint_bytes"] << " / " << ranks[1]["checkpoint_bytes"]);
    const int64_t state0 = ranks[0]["parameter_bytes"].get<int64_t>() + ranks[0]["optimizer_bytes"].get<int64_t>();
    const int64_t state1 = ranks[1]["parameter_bytes"].get<int64_t>() + ranks[1]["optimizer_bytes"].get<int64_t>();
    CHECK(ranks[0]["checkpoint_bytes"].get<int64_t>() == state0);
    CHECK(ranks[1]["checkpoint_bytes"].get<int64_t>() == (plugin == "ddp" ? 0 : state1));
  }
}

TEST_CASE("titan plan refuses, before launch, a parallelizer whose collective has another shape on one rank, naming "
          "the group, the ranks, both shapes and the call site") {
  auto result = plan_with_test_plugin("skewed_collective");
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(has(result.output, "group world (ranks 0,1), collective #"));
  CHECK(has(result.output, "rank 1 issued all_reduce [2] Double (sum) at 'step 1 / skewed_collective norm sum'"));
  CHECK(has(result.output, "where rank 0 issued all_reduce [1] Double (sum)"));
}

TEST_CASE("titan plan refuses a parallelizer whose collective one rank never issues: a deadlock, with every rank's "
          "wait") {
  auto result = plan_with_test_plugin("skipped_collective");
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(has(result.output, "deadlock"));
  CHECK(has(result.output, "rank 0 waits: all_reduce #"));
  CHECK(has(result.output, "at 'step 1 / skewed_collective norm sum'"));
}
