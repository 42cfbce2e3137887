// Pipeline parallelism end to end. Against the single-process reference
// (same seed, same data, fp32, 10 steps, batch 8 of 64 tokens) as real Gloo
// jobs: losses, grad norms and final parameters within 1e-5 relative for
// every built-in schedule at PP2 with 4 and 8 microbatches, 1F1B and
// Interleaved1F1B at PP4, a user's CSV schedule, FSDP2 x PP2 (each unit
// gathered and reduced once a step, from the flight recorder), DDP x PP2 and
// FSDP2 x TP2 x PP2, the zero-bubble split backward under TP2 and with
// activation checkpointing; a PP2 checkpoint resumed at PP4, without PP and under
// FSDP alone; the Chrome trace; shapes that cannot run refused at config
// check; a killed pipeline rank named by fr-analyze. titan-conformance
// passes the built-in schedules (each also trains on 2 ranks like one
// process) and the pipeline plugin's split, and fails each wrong schedule
// and a split that forgets a block by check name.
#include "equivalence_runs.hpp"

#include <map>

#include "conformance_report.hpp"

using titan::test::has;
using titan::test::conformance::conformance_json;
using titan::test::conformance::plugin_dir;
using titan::test::conformance::test_plugin;

namespace {

namespace fs = std::filesystem;
using titan::test::check_equivalent;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

// Six blocks, so PP4 with two stages per rank (8 stages: the embedding, six
// single blocks, the head) still splits; dims as the other equivalence tests.
const std::string kModel = " --set model.dim=64 --set model.n_layers=6 --set model.n_heads=4";

// `microbatches` of the local batch (num_pp_microbatches).
std::string pp(int degree, const std::string& schedule, int microbatches, const std::string& more = "") {
  return "{name: pipeline, pipeline_parallel_degree: " + std::to_string(degree) +
         ", pipeline_parallel_schedule: " + schedule + ", num_pp_microbatches: " + std::to_string(microbatches) +
         more + "}";
}

// Every pp rank reads the whole batch of 8 (dp = 1).
void check_schedule(const RunOutput& reference, const std::string& schedule, int degree, int microbatches, int port) {
  const std::string name = "pp" + std::to_string(degree) + "_" + schedule + "_m" + std::to_string(microbatches);
  INFO(name);
  // The microbatch size (8 / m) sets the count, as in TorchTitan's configs.
  const std::string plugin = "{name: pipeline, pipeline_parallel_degree: " + std::to_string(degree) +
                             ", pipeline_parallel_schedule: " + schedule + ", pipeline_parallel_microbatch_size: " +
                             std::to_string(8 / microbatches) + "}";
  check_equivalent(run_ranks(name, degree, port, plugin, kModel, 1), reference, 1e-5);
}

// FSDP under a pipeline gathers each unit once a step and reduce-scatters
// it once, after the step's last microbatch (FSDP2's behaviour), not once
// per microbatch: step 2's collectives in each rank's flight recorder dump,
// keyed by unit ("<stage> layers.<i>", or "root").
void check_fsdp_once_per_step(const fs::path& dump, int ranks) {
  for (int rank = 0; rank < ranks; ++rank) {
    const auto file = dump / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json");
    REQUIRE(fs::exists(file));
    std::map<std::string, int> calls;  // "<op> <unit>" -> times in step 2
    const nlohmann::json recorded = nlohmann::json::parse(titan::test::read_file(file));
    for (const auto& entry : recorded["entries"]) {
      const std::string site = entry["call_site"];
      const auto fsdp = site.find("/ fsdp ");  // "step 2 / pp 2F0 / fsdp all_gather layers.0"
      if (site.rfind("step 2 /", 0) != 0 || fsdp == std::string::npos) continue;
      const std::string unit = site.substr(site.find(' ', fsdp + 7) + 1);
      // The stage is the pipeline action's first number (the root's reduction runs outside any action).
      const auto pp = site.find("/ pp ");
      const std::string stage =
          pp == std::string::npos ? "" : site.substr(pp + 5, site.find_first_not_of("0123456789", pp + 5) - pp - 5);
      ++calls[entry["op"].get<std::string>() + " " + (unit == "root" ? unit : stage + " " + unit)];
    }
    INFO("rank " << rank);
    int gathers = 0, reductions = 0;
    for (const auto& [call, count] : calls) {
      CHECK_MESSAGE(count == 1, call << " ran " << count << " times");
      gathers += call.rfind("all_gather ", 0) == 0;
      reductions += call.rfind("reduce_scatter ", 0) == 0;
    }
    CHECK(gathers >= 2);  // the rank's blocks and its root unit
    CHECK(gathers == reductions);
  }
}

}  // namespace

TEST_CASE("pipeline: GPipe and 1F1B at PP2 with 4 and 8 microbatches and 1F1B at PP4 reproduce the single process") {
  RunOutput reference = run_single("pp_single_stage_reference", kModel);
  check_schedule(reference, "GPipe", 2, 4, 29780);
  check_schedule(reference, "GPipe", 2, 8, 29781);
  check_schedule(reference, "1F1B", 2, 4, 29782);
  check_schedule(reference, "1F1B", 2, 8, 29783);
  check_schedule(reference, "1F1B", 4, 4, 29784);
  check_schedule(reference, "1F1B", 4, 8, 29785);
}

TEST_CASE("pipeline: Interleaved1F1B, LoopedBFS and InterleavedZeroBubble (two stages per rank) at PP2 and "
          "Interleaved1F1B at PP4 reproduce the single process") {
  RunOutput reference = run_single("pp_looped_reference", kModel);
  check_schedule(reference, "Interleaved1F1B", 2, 4, 29786);
  check_schedule(reference, "Interleaved1F1B", 2, 8, 29787);
  check_schedule(reference, "LoopedBFS", 2, 4, 29788);
  check_schedule(reference, "LoopedBFS", 2, 8, 29789);
  check_schedule(reference, "InterleavedZeroBubble", 2, 4, 29790);
  check_schedule(reference, "InterleavedZeroBubble", 2, 8, 29791);
  check_schedule(reference, "Interleaved1F1B", 4, 4, 29792);
  check_schedule(reference, "Interleaved1F1B", 4, 8, 29793);
}

TEST_CASE("pipeline: the V schedules ZBVZeroBubble and DualPipeV and a user's CSV schedule at PP2 reproduce the "
          "single process") {
  RunOutput reference = run_single("pp_v_reference", kModel);
  check_schedule(reference, "ZBVZeroBubble", 2, 4, 29794);
  check_schedule(reference, "ZBVZeroBubble", 2, 8, 29795);
  check_schedule(reference, "DualPipeV", 2, 4, 29796);
  check_schedule(reference, "DualPipeV", 2, 8, 29797);
  // 1F1B written by hand, compute-only: core adds the sends and recvs.
  fs::path csv = titan::test::temp_dir("pp_csv_schedule") / "one_f_one_b.csv";
  std::ofstream(csv) << "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n";
  check_equivalent(run_ranks("pp2_csv", 2, 29798,
                             pp(2, "1F1B", 4, ", pipeline_parallel_schedule_csv: '" + csv.string() + "'"), kModel, 1),
                   reference, 1e-5);
}

TEST_CASE("pipeline: FSDP2 x PP2 (gathering and reducing each unit once a step), DDP x PP2 and FSDP2 x TP2 x PP2 "
          "reproduce the single process") {
  RunOutput reference = run_single("pp_composed_reference", kModel);
  // FSDP shards each stage over 2 ranks, which read different halves of the batch.
  const RunOutput fsdp_pp = run_ranks("fsdp2_pp2", 4, 29799,
                                      "{name: fsdp, dp_shard: 2}, " + pp(2, "Interleaved1F1B", 2) +
                                          ", {name: flight_recorder, dump_on_exit: true}",
                                      kModel, 2);
  check_equivalent(fsdp_pp, reference, 1e-5);
  check_fsdp_once_per_step(fsdp_pp.dump, 4);
  check_equivalent(run_ranks("ddp2_pp2", 4, 29800, "{name: ddp}, " + pp(2, "ZBVZeroBubble", 4), kModel, 2),
                   reference, 1e-5);
  check_equivalent(run_ranks("fsdp2_tp2_pp2", 8, 29801,
                             "{name: fsdp, dp_shard: 2}, {name: tensor_parallel, tensor_parallel_degree: 2, "
                             "enable_sequence_parallel: false}, " +
                                 pp(2, "1F1B", 2),
                             kModel, 2),
                   reference, 1e-5);
}

TEST_CASE("pipeline: the zero-bubble split backward (W from I's kept gradients) under TP2, and with activation "
          "checkpointing (I runs the whole backward), reproduces the single process; under float8 it reproduces 1F1B") {
  RunOutput reference = run_single("pp_split_reference", kModel);
  // Tensor parallelism's collectives sit on the activation path: W must not run them again.
  check_equivalent(run_ranks("tp2_pp2_zbv", 4, 29806,
                             "{name: tensor_parallel, tensor_parallel_degree: 2, enable_sequence_parallel: false}, " +
                                 pp(2, "ZBVZeroBubble", 4),
                             kModel, 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("ac_pp2_izb", 2, 29807,
                             "{name: activation_checkpoint, mode: full}, " + pp(2, "InterleavedZeroBubble", 4), kModel, 1),
                   reference, 1e-5);
  // float8's matmul node computes only the gradient autograd asks for (the
  // input's in I, the weight's in W). Against 1F1B on the same microbatches:
  // float8 scales each microbatch's activations, so one process differs.
  check_equivalent(run_ranks("float8_pp2_zbv", 2, 29808, "{name: float8}, " + pp(2, "ZBVZeroBubble", 4), kModel, 1),
                   run_ranks("float8_pp2_1f1b", 2, 29809, "{name: float8}, " + pp(2, "1F1B", 4), kModel, 1), 1e-5);
}

TEST_CASE("pipeline: a PP2 checkpoint resumes at PP4, without PP and under FSDP alone on the same loss curve; the "
          "Chrome trace holds every rank's actions") {
  const std::string checkpoints =
      " --set checkpoint.enable=true --set checkpoint.interval=5 --set checkpoint.keep_latest_k=0";
  fs::path trace = titan::test::temp_dir("pp2_trace") / "pipeline.json";
  RunOutput pp2 = run_ranks("pp2_saves", 2, 29802,
                            pp(2, "1F1B", 4, ", pipeline_parallel_trace: '" + trace.string() + "'"),
                            kModel + checkpoints, 1);
  // Every rank's file: 10 steps of its lowered list (1F1B, 4 microbatches: 4 F, 4 B, 4 sends, 4 recvs).
  for (int rank = 0; rank < 2; ++rank) {
    fs::path file = trace.parent_path() / ("pipeline_rank" + std::to_string(rank) + ".json");
    INFO(file.string());
    REQUIRE(fs::exists(file));
    auto json = nlohmann::json::parse(titan::test::read_file(file));
    const auto& events = json["traceEvents"];
    CHECK(events.size() == 10 * 16);
    CHECK(events[0]["name"].get<std::string>() == (rank == 0 ? "0F0" : "1RECV_F0"));
    CHECK(events[0]["ph"].get<std::string>() == "X");
  }

  // `runner`: titan, or titan under `titan launch`; `sets`: the run's own settings.
  auto resume = [&](const std::string& name, const std::string& runner, const std::string& sets) {
    std::string folder = "pp2_resumed_" + name;
    std::replace(folder.begin(), folder.end(), ' ', '_');
    fs::path dump = titan::test::temp_dir(folder);
    fs::create_directories(dump / "checkpoint");
    fs::copy(titan::test::temp_path("pp2_saves") / "checkpoint/step-5", dump / "checkpoint/step-5",
             fs::copy_options::recursive);
    auto result = run_command("timeout 300 " + runner + " train " + titan::test::source_dir() +
                              "/configs/llama3_debugmodel.yaml" + titan::test::common_sets(dump) + kModel +
                              checkpoints + sets);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    CHECK(result.output.find("resumed from checkpoint at step 5") != std::string::npos);
    RunOutput after = titan::test::read_run(dump);
    REQUIRE(after.losses.size() == 5);
    double worst = 0;
    for (size_t i = 0; i < 5; ++i) worst = std::max(worst, titan::test::relative(after.losses[i], pp2.losses[5 + i]));
    MESSAGE("PP2 -> " << name << ": max relative loss difference over steps 6-10: " << worst);
    CHECK(worst <= 1e-5);
  };
  const std::string titan = titan::test::titan_binary();
  auto launch = [&](int ranks, int port) {
    return titan + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " + std::to_string(port) +
           " --grace-period-s 5 -- " + titan;
  };
  resume("PP4", launch(4, 29803), " --set training.local_batch_size=8 --set 'plugins=[" + pp(4, "1F1B", 4) + "]'");
  resume("one process", titan, " --set training.local_batch_size=8");
  resume("FSDP2", launch(2, 29804), " --set training.local_batch_size=4 --set 'plugins=[{name: fsdp}]'");
}

TEST_CASE("pipeline: shapes a schedule cannot run and a CSV that would deadlock are refused at config check with "
          "the key, the rank and what would work") {
  const std::string config = titan::test::source_dir() + "/configs/llama3_debugmodel.yaml";
  auto check = [&](const std::string& sets, int world, const std::string& expected) {
    auto result = run_command(titan::test::titan_binary() + " config check " + config + " --world-size " +
                              std::to_string(world) + " --set training.local_batch_size=8" + sets);
    INFO(result.output);
    CHECK(result.exit_code != 0);
    CHECK(result.output.find(expected) != std::string::npos);
  };
  auto plugins = [](const std::string& list) { return " --set 'plugins=[" + list + "]'"; };
  check(plugins(pp(2, "DualPipeV", 2)), 2,
        "num_pp_microbatches = 2 (local_batch_size / pipeline_parallel_microbatch_size) is fewer than "
        "pipeline_parallel_schedule DualPipeV needs: at least 4");
  check(plugins(pp(2, "1F1B", 4, ", pipeline_parallel_layers_per_stage: 3")), 2,
        "pipeline_parallel_layers_per_stage gives 3 stages, not a multiple of pipeline_parallel_degree = 2");
  check(plugins(pp(2, "1F1B", 4, ", pipeline_parallel_layers_per_stage: 2")), 2,
        "pipeline_parallel_schedule 1F1B runs exactly 1 stage per rank");
  check(plugins(pp(2, "1F1B", 3)), 2, "does not split into num_pp_microbatches = 3");
  check(plugins(pp(2, "NoSuchSchedule", 4)), 2, "NoSuchSchedule");
  // A CSV with communication written out, rank 1's RECV_F of microbatch 1 missing.
  fs::path csv = titan::test::temp_dir("pp_bad_csv") / "missing_recv.csv";
  std::ofstream(csv) << "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                        "1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n";
  check(plugins(pp(2, "1F1B", 2, ", pipeline_parallel_schedule_csv: '" + csv.string() + "'")), 2,
        "rank 1, step 2 (1F1, microbatch 1): no 1RECV_F1 before it: its input was never received");
  // The shipped configs pass: the debug model on 2 ranks, 405B's 3-D layout
  // and DeepSeek-V3 671B's FSDP x EP 2 on 512.
  for (const auto& [name, world] : std::vector<std::pair<std::string, int>>{{"llama3_debugmodel_pp.yaml", 2},
                                                                            {"llama3_405b_3d.yaml", 512},
                                                                            {"deepseek_v3_671b.yaml", 512}}) {
    auto ok = run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() + "/configs/" +
                          name + " --world-size " + std::to_string(world));
    CHECK_MESSAGE(ok.exit_code == 0, name, "\n", ok.output);
  }
}

TEST_CASE("pipeline: a pipeline rank killed mid-step leaves its peer's flight recorder dump, and fr-analyze names "
          "the recv that never completed and the rank it waits for") {
  fs::path dump = titan::test::temp_dir("pp2_killed");
  // Rank 1 (stage 1) dies as its forward of step 2 starts; rank 0 has sent
  // it activations and waits for their gradients.
  auto result = run_command(
      "TITAN_TEST_SIGNAL=KILL:rank=1:phase=forward:step=2 timeout 240 " + titan::test::titan_binary() +
      " launch --nproc-per-node 2 --master-port 29805 --grace-period-s 20 -- " + titan::test::titan_binary() +
      " train " + titan::test::source_dir() + "/configs/llama3_debugmodel.yaml --set training.steps=3" +
      " --set training.seq_len=32 --set training.local_batch_size=4 --set training.threads=1" +
      " --set comm.train_timeout_seconds=30 --set job.dump_folder=" + dump.string() + kModel +
      " --set 'plugins=[" + pp(2, "1F1B", 2) + ", {name: flight_recorder, watchdog_timeout_seconds: 15}]'");
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("rank 1") != std::string::npos);
  REQUIRE(fs::exists(dump / "flight_recorder" / "rank_0.json"));
  auto analysis = run_command(titan::test::titan_binary() + " fr-analyze " + dump.string() + " 2>&1");
  INFO(analysis.output);
  CHECK(analysis.exit_code == 0);
  // Rank 0's point-to-point with rank 1 that never completed, named by its pp action: the RECV_B of
  // microbatch 0, or (when rank 0 saw the closed connection first, as under load) a SEND_F before it.
  const std::string& text = analysis.output;
  const bool recv = text.find("unmatched_recv: group 'pp/") != std::string::npos;
  const bool send = text.find("unmatched_send: group 'pp/") != std::string::npos;
  CHECK((recv || send));
  const bool names_peer = text.find("from rank 1") != std::string::npos || text.find("to rank 1") != std::string::npos;
  CHECK(names_peer);
  CHECK(text.find("at 'step 2 / pp 0") != std::string::npos);
  CHECK(text.find("rank 1 left no dump") != std::string::npos);
}

TEST_CASE("titan-conformance: the built-in pipeline schedules pass, training included, and wrong ones fail "
          "static_check by name") {
  std::vector<std::string> checks = {"pipeline_schedule.static_check", "pipeline_schedule.refusals_name_key",
                                     "pipeline_schedule.deterministic", "pipeline_schedule.accepts_some"};
  // Each schedule trains the 6-block model on 2 ranks like one process does.
  for (const char* schedule : {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                               "ZBVZeroBubble", "DualPipeV"}) {
    checks.push_back(std::string("pipeline_schedule.") + schedule + ".training@2");
  }
  auto builtin = conformance_json(plugin_dir() / "libtitan_plugin_pp_schedules.so");
  titan::test::conformance::check_all_pass(builtin, checks);
  CHECK(has(builtin.output, "max relative difference from one process over 3 steps (pp 2, 4 microbatches): loss "));
  auto wrong = conformance_json(test_plugin("wrong_pp_schedules"));
  INFO(wrong.output);
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.results["pipeline_schedule.static_check"] == "fail");
  CHECK(wrong.results["pipeline_schedule.deterministic"] == "pass");
  // Lists the trainer would refuse are not trained: skipped, never passed.
  for (const char* schedule : {"ForgetfulZB1F1B", "BackwardFirst1F1B", "CrossedWaits1F1B"}) {
    CHECK_MESSAGE(wrong.results[std::string("pipeline_schedule.") + schedule + ".training@2"] == "skip", schedule);
  }
  CHECK(has(wrong.output, "conformance check failed: pipeline_schedule.static_check"));
  CHECK(has(wrong.output, "ForgetfulZB1F1B (pp 2, 2 stages, 4 microbatches, loop placement): rank 0, microbatch 3: "
                          "runs 0I3"));
  CHECK(has(wrong.output, "backward of microbatch 0 of stage 1 before its forward"));
  CHECK(has(wrong.output, "CrossedWaits1F1B (pp 2, 2 stages, 4 microbatches, loop placement) deadlocks"));
}

TEST_CASE("titan-conformance: the pipeline split passes its split checks on 1 2 and 4 stages, and a split that "
          "forgets a block fails split_covers and split_cuts by name") {
  std::vector<std::string> checks;
  for (const char* check : {"split_count", "split_nonempty", "split_covers", "split_order", "split_cuts",
                            "split_deterministic"}) {
    for (const char* stages : {"@1", "@2", "@4"}) checks.push_back(std::string("pipeline_splitter.") + check + stages);
  }
  auto pipeline = conformance_json(plugin_dir() / "libtitan_plugin_pipeline.so", "--ranks 1,2,4");
  titan::test::conformance::check_all_pass(pipeline, checks);
  CHECK(has(pipeline.output, "[tok_embeddings layers.0] | [layers.1 layers.2] | [layers.3 layers.4] | "
                             "[layers.5 norm output]"));
  auto forgetful = conformance_json(test_plugin("forgetful_split"), "--ranks 2");
  INFO(forgetful.output);
  CHECK(forgetful.exit_code == 1);
  CHECK(has(forgetful.output, "conformance check failed: pipeline_splitter.split_covers@2 (layers.5 on no stage"));
  CHECK(has(forgetful.output, "conformance check failed: pipeline_splitter.split_cuts@2"));
  for (const char* check : {"split_count@2", "split_nonempty@2", "split_order@2", "split_deterministic@2"}) {
    CHECK_MESSAGE(forgetful.results[std::string("pipeline_splitter.") + check] == "pass", check);
  }
}
