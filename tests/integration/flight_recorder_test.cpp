// The flight recorder on real failures: ranks started by `titan launch`
// with a test-only fault (TITAN_TEST_FAULT, read by the comm layer) must all
// exit non-zero within the timeout, each leaving a dump, and `titan
// fr-analyze` must name the rank, op and group at fault. Also: the analyzer
// on hand-written dumps (collectives, and send/recv paired per stream),
// comm.verify_collectives, and dumps on signals.
#include "doctest_torch.hpp"

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "test_support.hpp"

namespace {

using titan::test::run_command;

struct Launched {
  titan::test::CommandResult result;
  double seconds = 0;
};

// A small run of the debug model on `ranks` ranks; `plugins` is YAML.
Launched launch_train(int ranks, int port, const std::filesystem::path& dump, const std::string& fault,
                      const std::string& extra_sets = "",
                      const std::string& plugins = "[{name: fsdp}, {name: flight_recorder}]") {
  std::string command = (fault.empty() ? "" : "TITAN_TEST_FAULT=" + fault + " ") + "timeout 240 " +
                        titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) +
                        " --master-port " + std::to_string(port) + " --grace-period-s 20 -- " +
                        titan::test::titan_binary() + " train " + titan::test::source_dir() +
                        "/configs/llama3_debugmodel.yaml --set training.steps=3 --set training.seq_len=32"
                        " --set training.local_batch_size=2 --set training.threads=1 --set metrics.log_freq=1"
                        " --set comm.train_timeout_seconds=30 --set job.dump_folder=" + dump.string() +
                        " --set 'plugins=" + plugins + "'" + extra_sets;
  auto start = std::chrono::steady_clock::now();
  Launched launched;
  launched.result = run_command(command);
  launched.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return launched;
}

nlohmann::json analyze_json(const std::filesystem::path& dir) {
  auto result = run_command(titan::test::titan_binary() + " fr-analyze " + dir.string() + " --json 2>/dev/null");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.output);
}

bool has_dump(const std::filesystem::path& dump, int rank) {
  return std::filesystem::exists(dump / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json"));
}

// A hand-written dump: entries are {sequence, op, shapes, call_site, state}.
struct FakeEntry {
  int sequence;
  std::string op, shapes, call_site, state;
};

void write_fake_dump(const std::filesystem::path& dir, int rank, int world_size, const std::vector<FakeEntry>& entries) {
  nlohmann::json list = nlohmann::json::array();
  int64_t last = -1;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    list.push_back({{"id", i}, {"sequence", e.sequence}, {"op", e.op}, {"group", "dp_shard"},
                    {"group_ranks", {0, 1, 2, 3}}, {"shapes", nlohmann::json::parse(e.shapes)}, {"dtype", "Float"},
                    {"bytes", 4}, {"call_site", e.call_site}, {"state", e.state},
                    {"enqueue_time_s", 1000.0 + e.sequence}, {"start_time_s", 1000.0 + e.sequence},
                    {"end_time_s", nullptr}});
    last = std::max<int64_t>(last, e.sequence);
  }
  nlohmann::json dump = {{"format", "titan-flight-recorder"}, {"version", 1}, {"rank", rank},
                         {"world_size", world_size}, {"pid", 1}, {"host", "h"}, {"trigger", "watchdog"},
                         {"reason", "test"}, {"dump_time_s", 2000.0}, {"buffer_size", 2000},
                         {"entries_recorded", entries.size()}, {"complete", true},
                         {"groups", nlohmann::json::array({nlohmann::json{{"name", "dp_shard"},
                                                                          {"ranks", {0, 1, 2, 3}},
                                                                          {"last_enqueued", last},
                                                                          {"last_started", last},
                                                                          {"last_completed", last - 1}}})},
                         {"entries", list}};
  titan::test::write_file(dir / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json"), dump.dump());
}

// A hand-written version 2 dump of one rank of the pipeline group 'pp/0' [0,1]:
// send/recv (peer, tag, number in the stream) and collectives, in the order given.
struct FakeOp {
  std::string op;  // send, recv or a collective
  int peer = -1, tag = 0;
  int64_t number = 0;  // p2p_sequence, or collective_sequence for a collective
  std::string state = "completed", call_site = "step 4 / pp", shapes = "[[2,4]]";
};

void write_pp_dump(const std::filesystem::path& dir, int rank, int world_size, const std::vector<FakeOp>& ops,
                   const std::string& trigger = "watchdog") {
  nlohmann::json entries = nlohmann::json::array();
  std::map<std::tuple<std::string, int, int>, std::pair<int64_t, int64_t>> streams;  // -> (last enqueued, completed)
  int64_t last_collective = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    const FakeOp& op = ops[i];
    nlohmann::json entry = {{"id", i}, {"sequence", i}, {"op", op.op}, {"group", "pp/0"}, {"group_ranks", {0, 1}},
                            {"shapes", nlohmann::json::parse(op.shapes)}, {"dtype", "Float"}, {"bytes", 32},
                            {"call_site", op.call_site}, {"state", op.state}, {"enqueue_time_s", 1000.0 + i},
                            {"start_time_s", 1000.0 + i}, {"end_time_s", nullptr}};
    if (op.op == "send" || op.op == "recv") {
      entry["peer"] = op.peer;
      entry["tag"] = op.tag;
      entry["p2p_sequence"] = op.number;
      auto& [enqueued, completed] = streams.try_emplace({op.op, op.peer, op.tag}, -1, -1).first->second;
      enqueued = std::max(enqueued, op.number);
      if (op.state == "completed") completed = std::max(completed, op.number);
    } else {
      entry["collective_sequence"] = op.number;
      last_collective = std::max(last_collective, op.number);
    }
    entries.push_back(entry);
  }
  nlohmann::json p2p = nlohmann::json::array();
  for (const auto& [key, counters] : streams) {
    p2p.push_back({{"group", "pp/0"}, {"group_ranks", {0, 1}}, {"op", std::get<0>(key)}, {"peer", std::get<1>(key)},
                   {"tag", std::get<2>(key)}, {"last_enqueued", counters.first}, {"last_completed", counters.second}});
  }
  const int64_t last = static_cast<int64_t>(ops.size()) - 1;
  nlohmann::json dump = {{"format", "titan-flight-recorder"}, {"version", 2}, {"rank", rank},
                         {"world_size", world_size}, {"pid", 1}, {"host", "h"}, {"trigger", trigger},
                         {"reason", "test"}, {"dump_time_s", 2000.0}, {"buffer_size", 2000},
                         {"entries_recorded", ops.size()}, {"complete", true},
                         {"groups", nlohmann::json::array({nlohmann::json{{"name", "pp/0"},
                                                                          {"ranks", {0, 1}},
                                                                          {"last_enqueued", last},
                                                                          {"last_started", last},
                                                                          {"last_completed", last},
                                                                          {"last_collective", last_collective}}})},
                         {"p2p", p2p}, {"entries", entries}};
  titan::test::write_file(dir / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json"), dump.dump());
}

// Stage 0 (rank 0) sends activations to stage 1 on tag 12 and receives gradients on tag 13, `microbatches`
// times; rank 1 does the mirror image.
std::vector<FakeOp> stage_ops(int rank, int microbatches) {
  std::vector<FakeOp> ops;
  const int peer = 1 - rank;
  for (int m = 0; m < microbatches; ++m) ops.push_back({rank == 0 ? "send" : "recv", peer, 12, m});
  for (int m = 0; m < microbatches; ++m) ops.push_back({rank == 0 ? "recv" : "send", peer, 13, m});
  return ops;
}

// A hand-written version 2 dump of collectives on several groups: each entry
// {group, ranks, collective number, op, shapes, call site, state, enqueue
// time, send_rows, recv_rows (empty: an even call)}, in the rank's order.
struct FakeCollective {
  std::string group;
  std::vector<int> ranks;
  int64_t number;
  std::string op, shapes, call_site, state;
  double time;
  std::vector<int64_t> send_rows = {}, recv_rows = {};
};

void write_groups_dump(const std::filesystem::path& dir, int rank, int world_size,
                       const std::vector<FakeCollective>& calls) {
  nlohmann::json entries = nlohmann::json::array();
  std::map<std::string, std::pair<std::vector<int>, int64_t>> groups;  // -> (ranks, last collective)
  for (size_t i = 0; i < calls.size(); ++i) {
    const FakeCollective& c = calls[i];
    nlohmann::json entry = {{"id", i}, {"sequence", c.number}, {"collective_sequence", c.number}, {"op", c.op},
                            {"group", c.group}, {"group_ranks", c.ranks}, {"shapes", nlohmann::json::parse(c.shapes)},
                            {"dtype", "Float"}, {"bytes", 4}, {"call_site", c.call_site}, {"state", c.state},
                            {"enqueue_time_s", c.time}, {"start_time_s", c.time}, {"end_time_s", nullptr}};
    if (!c.send_rows.empty()) {
      entry["send_rows"] = c.send_rows;
      entry["recv_rows"] = c.recv_rows;
    }
    entries.push_back(entry);
    auto& group = groups[c.group];
    group.first = c.ranks;
    group.second = std::max<int64_t>(group.second, c.number);
  }
  nlohmann::json status = nlohmann::json::array();
  for (const auto& [name, group] : groups) {
    status.push_back({{"name", name}, {"ranks", group.first}, {"last_enqueued", group.second},
                      {"last_started", group.second}, {"last_completed", group.second - 1},
                      {"last_collective", group.second}});
  }
  nlohmann::json dump = {{"format", "titan-flight-recorder"}, {"version", 2}, {"rank", rank},
                         {"world_size", world_size}, {"pid", 1}, {"host", "h"}, {"trigger", "watchdog"},
                         {"reason", "test"}, {"dump_time_s", 2000.0}, {"buffer_size", 2000},
                         {"entries_recorded", calls.size()}, {"complete", true}, {"groups", status},
                         {"p2p", nlohmann::json::array()}, {"entries", entries}};
  titan::test::write_file(dir / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json"), dump.dump());
}

std::string analyze_text(const std::filesystem::path& dir) {
  auto result = run_command(titan::test::titan_binary() + " fr-analyze " + dir.string() + " 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

}  // namespace

TEST_SUITE("flight_recorder") {
  TEST_CASE("flight recorder: a rank skipping one all-gather makes all 4 ranks exit non-zero with dumps and "
            "fr-analyze names the rank and the op and the group") {
    auto dump = titan::test::temp_dir("fr_skip_all_gather");
    // dp_shard seq 3 is a block's all-gather in the first forward. The
    // watchdog (15 s: a healthy collective on a loaded 2-core machine can
    // wait 5 s for a late peer) acts long before the comm layer's own
    // timeout (60 s).
    auto launched = launch_train(4, 29911, dump, "skip:rank=2:op=all_gather:group=dp_shard:seq=3",
                                 " --set comm.train_timeout_seconds=60",
                                 "[{name: fsdp}, {name: flight_recorder, watchdog_timeout_seconds: 15}]");
    INFO(launched.result.output);
    CHECK(launched.result.exit_code != 0);
    CHECK(launched.seconds < 150);  // generous: CI machines are loaded
    CHECK(launched.result.output.find("sending SIGKILL") == std::string::npos);  // every rank ended by itself
    CHECK(launched.result.output.find("exited with status 3") != std::string::npos);  // the watchdog's exit
    CHECK(launched.result.output.find("flight_recorder: watchdog: rank") != std::string::npos);
    CHECK(launched.result.output.find("is stuck: #") != std::string::npos);
    for (int rank = 0; rank < 4; ++rank) CHECK_MESSAGE(has_dump(dump, rank), "no dump from rank ", rank);
    auto report = analyze_json(dump);
    INFO(report.dump(2));
    CHECK(report["missing_ranks"].empty());
    const auto& first = report["first_divergence"];
    REQUIRE(first.is_object());
    CHECK(first["faulty_ranks"] == nlohmann::json::array({2}));
    CHECK(first["op"] == "all_gather");
    CHECK(first["group"].get<std::string>().rfind("dp_shard/", 0) == 0);  // the mesh dim's group
    CHECK(first["sequence"] == 3);
    auto text = run_command(titan::test::titan_binary() + " fr-analyze " + dump.string());
    CHECK(text.output.find("first divergence") != std::string::npos);
    CHECK(text.output.find("rank 2") != std::string::npos);
  }

  TEST_CASE("flight recorder: mismatched all-reduce sizes kill a rank from a Gloo thread yet every rank leaves "
            "a dump and fr-analyze reports the size mismatch and the ranks") {
    auto dump = titan::test::temp_dir("fr_size_mismatch");
    // DDP's first gradient bucket: Gloo's TCP pair enforces sizes and throws on its own thread.
    auto launched = launch_train(2, 29913, dump, "grow:rank=1:op=all_reduce:group=dp_replicate", "",
                                 "[{name: ddp}, {name: flight_recorder}]");
    INFO(launched.result.output);
    CHECK(launched.result.exit_code != 0);
    CHECK(launched.seconds < 150);
    for (int rank = 0; rank < 2; ++rank) CHECK_MESSAGE(has_dump(dump, rank), "no dump from rank ", rank);
    CHECK(launched.result.output.find("flight_recorder: std::terminate called") != std::string::npos);
    bool terminate_dump = false;
    for (int rank = 0; rank < 2; ++rank) {
      auto json = nlohmann::json::parse(
          titan::test::read_file(dump / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json")));
      terminate_dump |= json["trigger"] == "terminate";
    }
    CHECK(terminate_dump);  // written by the terminate handler, on the Gloo thread
    auto report = analyze_json(dump);
    INFO(report.dump(2));
    const auto& first = report["first_divergence"];
    REQUIRE(first.is_object());
    CHECK(first["kind"] == "size_mismatch");
    CHECK(first["group"].get<std::string>().rfind("dp_replicate/", 0) == 0);
    CHECK(first["op"] == "all_reduce");
    CHECK(first["faulty_ranks"] == nlohmann::json::array({0, 1}));  // two ranks: no majority to blame
    std::string summary = first["summary"].get<std::string>();
    CHECK(summary.find("rank 0 [[") != std::string::npos);
    CHECK(summary.find("rank 1 [[") != std::string::npos);
  }

  TEST_CASE("flight recorder: a SIGKILLed rank makes the others exit within the timeout and fr-analyze reports it "
            "missing") {
    auto dump = titan::test::temp_dir("fr_sigkill");
    auto launched = launch_train(3, 29915, dump, "", " --set debug.crash_rank=1 --set debug.crash_at_step=1");
    INFO(launched.result.output);
    CHECK(launched.result.exit_code != 0);
    CHECK(launched.seconds < 150);
    CHECK(has_dump(dump, 0));
    CHECK(has_dump(dump, 2));
    CHECK_FALSE(has_dump(dump, 1));
    auto report = analyze_json(dump);
    INFO(report.dump(2));
    CHECK(report["missing_ranks"] == nlohmann::json::array({1}));
    CHECK(report["first_divergence"]["kind"] == "missing_rank");
    CHECK(report["first_divergence"]["faulty_ranks"] == nlohmann::json::array({1}));
  }

  TEST_CASE("flight recorder: comm.verify_collectives fails fast on every rank with the first differing "
            "collective and passes a healthy run") {
    auto dump = titan::test::temp_dir("fr_verify");
    // Same bytes, another shape: Gloo runs it fine, so only the check can tell.
    auto bad = launch_train(2, 29917, dump, "reshape:rank=1:op=all_reduce:group=world",
                            " --set comm.verify_collectives=true");
    INFO(bad.result.output);
    CHECK(bad.result.exit_code != 0);
    CHECK(bad.seconds < 60);
    for (const char* rank : {"[rank 0]", "[rank 1]"}) {
      CHECK(bad.result.output.find(std::string(rank) + " titan: error: comm.verify_collectives: ranks disagree") !=
            std::string::npos);
    }
    CHECK(bad.result.output.find("on group 'world': rank 0 issued all_reduce [1] Double") != std::string::npos);
    CHECK(bad.result.output.find("rank 1 issued all_reduce [1,1] Double") != std::string::npos);

    auto good = launch_train(2, 29919, dump, "", " --set comm.verify_collectives=true");
    INFO(good.result.output);
    CHECK(good.result.exit_code == 0);
    CHECK(good.result.output.find("agree on all 2 ranks") != std::string::npos);
  }

  TEST_CASE("flight recorder: comm.verify_collectives_interval names a divergence of a later step at that step") {
    auto dump = titan::test::temp_dir("fr_verify_interval");
    // World collective #2 is step 2's all-reduce of the gradient norm (#0 is
    // step 1's, #1 its check's all-gather): same bytes, another shape, only
    // on rank 1.
    auto bad = launch_train(2, 29393, dump, "reshape:rank=1:op=all_reduce:group=world:seq=2",
                            " --set comm.verify_collectives_interval=1");
    INFO(bad.result.output);
    CHECK(bad.result.exit_code != 0);
    CHECK(bad.seconds < 60);
    CHECK(bad.result.output.find("comm.verify_collectives: ranks disagree on their collectives of step 2: "
                                 "collective #0 on group 'world': rank 0 issued all_reduce [1] Double at 'step 2', "
                                 "rank 1 issued all_reduce [1,1] Double at 'step 2'") != std::string::npos);
    auto refused = run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() +
                               "/configs/llama3_debugmodel.yaml --set comm.verify_collectives_interval=-1");
    CHECK(refused.exit_code != 0);
    CHECK(refused.output.find("comm.verify_collectives_interval: must be >= 0") != std::string::npos);
  }

  TEST_CASE("flight recorder: SIGUSR1 dumps on demand and training goes on and SIGTERM dumps and still stops cleanly") {
    auto dump = titan::test::temp_dir("fr_signals");
    std::string files = (dump / "flight_recorder" / "rank_0.json").string();
    // One process: FSDP over one rank still runs its collectives through Gloo.
    std::string script =
        titan::test::titan_binary() + " train " + titan::test::source_dir() +
        "/configs/llama3_debugmodel.yaml --set training.steps=100000 --set training.seq_len=32"
        " --set training.local_batch_size=2 --set training.threads=1 --set metrics.log_freq=1 --set job.dump_folder=" +
        dump.string() + " --set 'plugins=[{name: fsdp}, {name: flight_recorder}]' > " + (dump / "log.txt").string() +
        " 2>&1 & pid=$!; for i in $(seq 1 600); do [ -s " + (dump / "metrics.jsonl").string() +
        " ] && break; sleep 0.1; done; kill -USR1 $pid; for i in $(seq 1 50); do [ -f " + files +
        " ] && break; sleep 0.1; done; cp " + files + " " + (dump / "usr1.json").string() +
        "; sleep 0.5; kill -0 $pid && echo ALIVE_AFTER_USR1; kill -TERM $pid; wait $pid; echo EXIT=$?";
    titan::test::write_file(dump / "signals.sh", script + "\n");
    auto result = run_command("timeout 120 bash " + (dump / "signals.sh").string());
    std::string log = titan::test::read_file(dump / "log.txt");
    INFO(result.output);
    INFO(log);
    CHECK(result.output.find("ALIVE_AFTER_USR1") != std::string::npos);
    CHECK(result.output.find("EXIT=0") != std::string::npos);  // the trainer's own clean stop still ran
    auto on_demand = nlohmann::json::parse(titan::test::read_file(dump / "usr1.json"));
    CHECK(on_demand["trigger"] == "on_demand");
    CHECK(on_demand["entries"].size() > 0);
    auto final_dump = nlohmann::json::parse(titan::test::read_file(files));
    CHECK(final_dump["trigger"] == "signal");
    CHECK(log.find("stopped cleanly") != std::string::npos);
    CHECK(log.find("flight_recorder: crash report") != std::string::npos);
    // The documented fields are there.
    for (const char* key : {"rank", "world_size", "pid", "host", "reason", "dump_time_s", "buffer_size", "groups"}) {
      CHECK_MESSAGE(final_dump.contains(key), key);
    }
    const auto& entry = final_dump["entries"][0];
    for (const char* key : {"id", "sequence", "op", "group", "group_ranks", "shapes", "dtype", "bytes", "call_site",
                            "state", "enqueue_time_s", "start_time_s", "end_time_s"}) {
      CHECK_MESSAGE(entry.contains(key), key);
    }
  }

  TEST_CASE("fr-analyze: on hand-written dumps it finds a rank in another op and a rank that never entered and "
            "refuses bad input naming the file") {
    auto dir = titan::test::temp_dir("fr_analyze_fake");
    // Ranks 0, 1, 3 are in all_gather seq 2; rank 2 ran an all_reduce there.
    for (int rank : {0, 1, 3}) {
      write_fake_dump(dir, rank, 4, {{0, "all_gather", "[[4]]", "step 1 / a", "completed"},
                                     {1, "all_gather", "[[4]]", "step 1 / b", "completed"},
                                     {2, "all_gather", "[[4]]", "step 1 / c", "started"}});
    }
    write_fake_dump(dir, 2, 4, {{0, "all_gather", "[[4]]", "step 1 / a", "completed"},
                                {1, "all_gather", "[[4]]", "step 1 / b", "completed"},
                                {2, "all_reduce", "[[4]]", "step 1 / d", "started"}});
    auto report = analyze_json(dir);
    CHECK(report["first_divergence"]["kind"] == "op_mismatch");
    CHECK(report["first_divergence"]["faulty_ranks"] == nlohmann::json::array({2}));
    CHECK(report["first_divergence"]["sequence"] == 2);

    auto behind = titan::test::temp_dir("fr_analyze_behind");
    for (int rank : {0, 1, 2}) {
      write_fake_dump(behind, rank, 4, {{0, "all_gather", "[[4]]", "x", "completed"},
                                        {1, "all_gather", "[[4]]", "y", "started"}});
    }
    write_fake_dump(behind, 3, 4, {{0, "all_gather", "[[4]]", "x", "completed"}});
    report = analyze_json(behind);
    CHECK(report["first_divergence"]["kind"] == "not_entered");
    CHECK(report["first_divergence"]["faulty_ranks"] == nlohmann::json::array({3}));

    titan::test::write_file(behind / "flight_recorder" / "rank_1.json", "{\"format\": ");
    auto broken = run_command(titan::test::titan_binary() + " fr-analyze " + behind.string());
    CHECK(broken.exit_code == 1);
    CHECK(broken.output.find("rank_1.json' is not valid JSON") != std::string::npos);
    titan::test::write_file(behind / "flight_recorder" / "rank_1.json",
                            "{\"format\": \"titan-flight-recorder\", \"version\": 1, \"rank\": 1}");
    broken = run_command(titan::test::titan_binary() + " fr-analyze " + behind.string());
    CHECK(broken.exit_code == 1);
    CHECK(broken.output.find("rank_1.json: missing key 'world_size'") != std::string::npos);
    auto empty = run_command(titan::test::titan_binary() + " fr-analyze " + titan::test::temp_dir("fr_none").string());
    CHECK(empty.exit_code == 1);
    CHECK(empty.output.find("no flight recorder dumps") != std::string::npos);
  }

  TEST_CASE("fr-analyze: uneven all-to-alls (expert parallelism) differ in shape by design and are checked pairwise "
            "by their splits; a rank that skipped one is named first, before the reduce-scatter its peer then "
            "never reaches, whatever the clocks say") {
    // FSDP 4 x ep 2: dp_shard [0,1,2,3], ep groups [0,1] and [2,3]. Step 1:
    // a dispatch on each ep group with uneven, consistent splits, then a
    // reduce-scatter. Step 5: rank 2 skips its combine's backward
    // all-to-all (it received no rows) and goes on into the reduce-scatter,
    // where rank 3, stuck in that all-to-all, never arrives. Rank 3's clock
    // runs late, so by time its all-to-all looks last.
    const std::vector<int> all{0, 1, 2, 3};
    auto ep_of = [](int rank) { return rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}; };
    auto ep_name = [](int rank) { return std::string(rank < 2 ? "ep/efsdp0" : "ep/efsdp1"); };
    // Rows each rank sends to [first, second] member of its ep group, and receives.
    const std::map<int, std::pair<std::vector<int64_t>, std::vector<int64_t>>> splits = {
        {0, {{2, 3}, {2, 1}}}, {1, {{1, 3}, {3, 3}}}, {2, {{4, 0}, {4, 6}}}, {3, {{6, 2}, {0, 2}}}};
    auto write = [&](const std::filesystem::path& dir, bool skip, const std::map<int, std::vector<int64_t>>& recv_override) {
      for (int rank : all) {
        auto [send, recv] = splits.at(rank);
        if (recv_override.count(rank)) recv = recv_override.at(rank);
        const int64_t rows = send[0] + send[1];
        const double clock = rank == 3 ? 50.0 : 0.0;
        std::vector<FakeCollective> calls = {
            {ep_name(rank), ep_of(rank), 0, "all_to_all", "[[" + std::to_string(rows) + ",64]]",
             "step 1 / expert_parallel dispatch layers.1.moe", "completed", 1000 + clock, send, recv},
            {"dp_shard", all, 0, "reduce_scatter", "[[1024]]", "step 1 / fsdp reduce_scatter layers.1", "completed",
             1001 + clock}};
        const std::string combine = "step 5 / expert_parallel combine layers.4.moe (backward)";
        if (!(skip && rank == 2)) {
          calls.push_back({ep_name(rank), ep_of(rank), 1, "all_to_all", "[[" + std::to_string(rows) + ",64]]", combine,
                           rank == 3 ? "started" : "completed", 1010 + clock, recv, send});
        }
        if (rank != 3) {
          calls.push_back({"dp_shard", all, 1, "reduce_scatter", "[[1024]]", "step 5 / fsdp reduce_scatter layers.4",
                           "started", 1020 + clock});
        }
        write_groups_dump(dir, rank, 4, calls);
      }
    };
    // Before the skip everything matches, uneven shapes and all: only the
    // hang at step 5 is reported, and the skipped all-to-all first.
    auto skipped = titan::test::temp_dir("fr_uneven_skipped");
    write(skipped, true, {});
    auto report = analyze_json(skipped);
    INFO(report.dump(2));
    CHECK(report["first_divergence"]["kind"] == "not_entered");
    CHECK(report["first_divergence"]["group"] == "ep/efsdp1");
    CHECK(report["first_divergence"]["faulty_ranks"] == nlohmann::json::array({2}));
    CHECK(report["first_divergence"]["sequence"] == 1);
    CHECK(report["findings"].size() == 2);  // then the reduce-scatter rank 3 never reached
    CHECK(report["findings"][1]["group"] == "dp_shard");
    CHECK(report["findings"][1]["faulty_ranks"] == nlohmann::json::array({3}));
    const std::string text = analyze_text(skipped);
    CHECK(text.find("rows to [0,2] from [6,2]") != std::string::npos);  // rank 3's splits are shown

    // What rank 1 expects from rank 0 (recv_rows[0] = 2) is not what rank 0 sends it (3).
    auto mismatched = titan::test::temp_dir("fr_uneven_mismatch");
    write(mismatched, false, {{1, {2, 3}}});
    report = analyze_json(mismatched);
    INFO(report.dump(2));
    CHECK(report["first_divergence"]["kind"] == "split_mismatch");
    CHECK(report["first_divergence"]["group"] == "ep/efsdp0");
    CHECK(report["first_divergence"]["faulty_ranks"] == nlohmann::json::array({0, 1}));
    CHECK(report["first_divergence"]["summary"].get<std::string>().find(
              "rank 0 sends 3 rows to rank 1, which expects 2 from it") != std::string::npos);

    // Splits that do not have one count per member are refused naming the key.
    auto bad = titan::test::temp_dir("fr_uneven_bad");
    write(bad, false, {{1, {2}}});
    auto refused = run_command(titan::test::titan_binary() + " fr-analyze " + bad.string() + " 2>&1");
    CHECK(refused.exit_code == 1);
    CHECK_MESSAGE(refused.output.find("'send_rows' and 'recv_rows' must have one count per member") !=
                      std::string::npos, refused.output);
  }

  TEST_CASE("fr-analyze: send/recv pair per stream: a matched exchange is clean and the collectives of the same "
            "group are aligned apart from them") {
    auto dir = titan::test::temp_dir("fr_p2p_matched");
    // Rank 0 does 3 sends and 3 recvs, rank 1 the same mirrored, then both one all_reduce: per group the
    // ranks' sequence ids differ nowhere here, but the all_reduce is collective #0 on both.
    for (int rank : {0, 1}) {
      auto ops = stage_ops(rank, 3);
      ops.push_back({"all_reduce", -1, 0, 0});
      write_pp_dump(dir, rank, 2, ops, "exit");
    }
    auto report = analyze_json(dir);
    INFO(report.dump(2));
    CHECK(report["findings"].empty());
    CHECK(report["first_divergence"].is_null());
    REQUIRE(report["p2p_streams"].size() == 2);
    for (const auto& stream : report["p2p_streams"]) {
      CHECK(stream["status"] == "matched");
      CHECK(stream["sends"] == 3);
      CHECK(stream["recvs"] == 3);
      CHECK(stream["matched"] == 3);
    }
    CHECK(report["p2p_streams"][0]["from"] == 0);
    CHECK(report["p2p_streams"][0]["to"] == 1);
    CHECK(report["p2p_streams"][0]["tag"] == 12);
    CHECK(report["p2p"][0] == "group 'pp/0' [0,1]: 2 send/recv streams, 6 pairs matched; every send has its recv");
    std::string text = analyze_text(dir);
    CHECK(text.find("no divergence found: every rank agrees on every collective still in the buffers, and every "
                    "send has its recv") != std::string::npos);
    CHECK(text.find("send/recv, paired per stream (group, sender, receiver, tag):") != std::string::npos);

    // The collectives of a group with send/recv are still compared, by their own number: rank 1 posted
    // one send fewer (its collective has another sequence id) and an all_gather for the all_reduce.
    auto mixed = titan::test::temp_dir("fr_p2p_mixed");
    write_pp_dump(mixed, 0, 2, {{"send", 1, 12, 0}, {"send", 1, 12, 1}, {"all_reduce", -1, 0, 0, "started"}});
    write_pp_dump(mixed, 1, 2, {{"recv", 0, 12, 0}, {"recv", 0, 12, 1}, {"all_gather", -1, 0, 0, "started"}});
    report = analyze_json(mixed);
    INFO(report.dump(2));
    REQUIRE(report["findings"].size() == 1);
    CHECK(report["first_divergence"]["kind"] == "op_mismatch");
    CHECK(report["first_divergence"]["sequence"] == 0);
    CHECK(report["p2p_streams"][0]["status"] == "matched");
  }

  TEST_CASE("fr-analyze: a recv whose send never came names the recv, the sender and the rank stuck in it") {
    auto dir = titan::test::temp_dir("fr_p2p_missing_send");
    // Rank 0 sent activations #0..#2 on tag 12; rank 1 posted recv #3 too and waits in it.
    write_pp_dump(dir, 0, 2, {{"send", 1, 12, 0}, {"send", 1, 12, 1}, {"send", 1, 12, 2, "completed", "step 4 / pp F2"}});
    write_pp_dump(dir, 1, 2, {{"recv", 0, 12, 0}, {"recv", 0, 12, 1}, {"recv", 0, 12, 2},
                              {"recv", 0, 12, 3, "started", "step 4 / pp F3"}});
    auto report = analyze_json(dir);
    INFO(report.dump(2));
    REQUIRE(report["findings"].size() == 1);
    const auto& first = report["first_divergence"];
    CHECK(first["kind"] == "unmatched_recv");
    CHECK(first["group"] == "pp/0");
    CHECK(first["op"] == "recv");
    CHECK(first["sequence"] == 3);
    CHECK(first["from"] == 0);
    CHECK(first["to"] == 1);
    CHECK(first["tag"] == 12);
    CHECK(first["faulty_ranks"] == nlohmann::json::array({0}));
    CHECK(first["stuck_ranks"] == nlohmann::json::array({1}));
    CHECK(first["summary"] ==
          "group 'pp/0' [0,1]: rank 1 posted recv #3 from rank 0 (tag 12) [[2,4]] Float at 'step 4 / pp F3' "
          "(started) that rank 0 never sent; rank 0's last send to rank 1 on tag 12 was #2 [[2,4]] Float at "
          "'step 4 / pp F2' (completed); rank 1 is stuck waiting for it");
    CHECK(report["p2p_streams"][0]["status"] == "unmatched_recv");
    std::string text = analyze_text(dir);
    CHECK(text.find("first divergence: unmatched_recv: group 'pp/0' [0,1]: rank 1 posted recv #3 from rank 0") !=
          std::string::npos);
    CHECK(text.find("rank 0: sends to rank 1 on tag 12: posted #0..#2, completed #0..#2") != std::string::npos);
    CHECK(text.find("rank 1: recvs from rank 0 on tag 12: posted #0..#3, completed #0..#2") != std::string::npos);
    CHECK(text.find("group 'pp/0' [0,1]: 1 send/recv stream, 3 pairs matched; rank 0 -> rank 1 tag 12: recv #3 "
                    "unmatched") != std::string::npos);
    CHECK(text.find("group 'pp/0' [0,1]: rank 1 in recv #3 from rank 0 (tag 12) [[2,4]] Float at 'step 4 / pp F3' "
                    "(started), unmatched: rank 0 never sent it") != std::string::npos);

    // A recv that failed (the sender's process ended and closed the connection) was waited on as well.
    write_pp_dump(dir, 1, 2, {{"recv", 0, 12, 0}, {"recv", 0, 12, 1}, {"recv", 0, 12, 2},
                              {"recv", 0, 12, 3, "failed", "step 4 / pp F3"}});
    report = analyze_json(dir);
    INFO(report.dump(2));
    CHECK(report["first_divergence"]["stuck_ranks"] == nlohmann::json::array({1}));
    std::string failed = report["first_divergence"]["summary"].get<std::string>();
    CHECK(failed.find("(failed) that rank 0 never sent") != std::string::npos);
    CHECK(failed.find("; rank 1 was stuck waiting for it until it failed") != std::string::npos);

    // The sender left no dump (killed): the recv it never answered is still named, after the missing rank.
    write_pp_dump(dir, 1, 2, {{"recv", 0, 12, 0}, {"recv", 0, 12, 1}, {"recv", 0, 12, 2},
                              {"recv", 0, 12, 3, "started", "step 4 / pp F3"}});
    std::filesystem::remove(dir / "flight_recorder" / "rank_0.json");
    report = analyze_json(dir);
    INFO(report.dump(2));
    REQUIRE(report["findings"].size() == 2);
    CHECK(report["findings"][0]["kind"] == "missing_rank");
    const auto& waiting = report["findings"][1];
    CHECK(waiting["kind"] == "unmatched_recv");
    CHECK(waiting["sequence"] == 3);
    CHECK(waiting["stuck_ranks"] == nlohmann::json::array({1}));
    CHECK(waiting["summary"] ==
          "group 'pp/0' [0,1]: rank 1 posted recv #3 from rank 0 (tag 12) [[2,4]] Float at 'step 4 / pp F3' "
          "(started) and rank 0 left no dump, so no send can be paired with it; rank 1 is stuck waiting for it");
    CHECK(report["p2p_streams"][0]["status"] == "peer_missing");
    CHECK(report["p2p_streams"][0]["sends"].is_null());
  }

  TEST_CASE("fr-analyze: a send nobody received names the send and its receiver; sizes that differ in a pair are "
            "named; a version 1 dump with send/recv still reads") {
    auto dir = titan::test::temp_dir("fr_p2p_missing_recv");
    // Rank 1 sends gradients back on tag 13: #0 and #1 received by rank 0, #2 never posted there.
    write_pp_dump(dir, 0, 2, {{"send", 1, 12, 0}, {"recv", 1, 13, 0}, {"recv", 1, 13, 1}});
    write_pp_dump(dir, 1, 2, {{"recv", 0, 12, 0}, {"send", 0, 13, 0}, {"send", 0, 13, 1},
                              {"send", 0, 13, 2, "started", "step 4 / pp B2"}});
    auto report = analyze_json(dir);
    INFO(report.dump(2));
    REQUIRE(report["findings"].size() == 1);
    const auto& first = report["first_divergence"];
    CHECK(first["kind"] == "unmatched_send");
    CHECK(first["op"] == "send");
    CHECK(first["sequence"] == 2);
    CHECK(first["from"] == 1);
    CHECK(first["to"] == 0);
    CHECK(first["tag"] == 13);
    CHECK(first["faulty_ranks"] == nlohmann::json::array({0}));
    CHECK(first["stuck_ranks"] == nlohmann::json::array({1}));
    CHECK(first["summary"] ==
          "group 'pp/0' [0,1]: rank 1 posted send #2 to rank 0 (tag 13) [[2,4]] Float at 'step 4 / pp B2' "
          "(started) that rank 0 never received; rank 0's last recv from rank 1 on tag 13 was #1 [[2,4]] Float at "
          "'step 4 / pp' (completed); rank 1 is stuck waiting for it");

    auto sizes = titan::test::temp_dir("fr_p2p_sizes");
    write_pp_dump(sizes, 0, 2, {{"send", 1, 12, 0}, {"send", 1, 12, 1, "started", "step 4 / pp", "[[2,8]]"}});
    write_pp_dump(sizes, 1, 2, {{"recv", 0, 12, 0}, {"recv", 0, 12, 1, "started"}});
    report = analyze_json(sizes);
    INFO(report.dump(2));
    CHECK(report["first_divergence"]["kind"] == "p2p_size_mismatch");
    CHECK(report["first_divergence"]["faulty_ranks"] == nlohmann::json::array({0, 1}));
    CHECK(report["first_divergence"]["summary"].get<std::string>().find(
              "send #1 from rank 0 to rank 1 (tag 12) carries [[2,8]] Float but rank 1's recv #1 expects [[2,4]] "
              "Float") != std::string::npos);

    // Version 1: send/recv without peer; the group is reported, not aligned, and nothing is blamed.
    auto old = titan::test::temp_dir("fr_p2p_version1");
    for (int rank : {0, 1}) {
      write_fake_dump(old, rank, 2, {{0, rank == 0 ? "send" : "recv", "[[4]]", "step 1", "completed"},
                                     {1, "all_reduce", "[[4]]", "step 1", "completed"}});
    }
    report = analyze_json(old);
    INFO(report.dump(2));
    CHECK(report["findings"].empty());
    CHECK(report["p2p"][0].get<std::string>().find("send/recv recorded without peer and stream number (a version 1 "
                                                   "dump): not paired") != std::string::npos);
  }

  TEST_CASE("flight recorder: a context-parallel run passing K/V by send/recv dumps numbered streams and "
            "fr-analyze pairs every send with its recv") {
    auto dump = titan::test::temp_dir("fr_p2p_ring");
    auto launched = launch_train(2, 29921, dump, "", "",
                                 "[{name: fsdp}, {name: context_parallel, context_parallel_rotate_method: alltoall}, "
                                 "{name: flight_recorder, dump_on_exit: true}]");
    INFO(launched.result.output);
    REQUIRE(launched.result.exit_code == 0);
    for (int rank = 0; rank < 2; ++rank) REQUIRE_MESSAGE(has_dump(dump, rank), "no dump from rank ", rank);
    auto rank0 = nlohmann::json::parse(titan::test::read_file(dump / "flight_recorder" / "rank_0.json"));
    CHECK(rank0["version"] == 2);
    CHECK(rank0["p2p"].size() > 0);
    bool numbered_send = false;
    for (const auto& entry : rank0["entries"]) {
      if (entry["op"] == "send") numbered_send |= entry.contains("peer") && entry.contains("p2p_sequence");
    }
    CHECK(numbered_send);
    auto report = analyze_json(dump);
    INFO(report.dump(2));
    CHECK(report["findings"].empty());
    REQUIRE(report["p2p_streams"].size() > 0);
    for (const auto& stream : report["p2p_streams"]) {
      CHECK(stream["status"] == "matched");
      CHECK(stream["sends"] == stream["recvs"]);
    }
  }

  TEST_CASE("flight recorder: a rank skipping one send of ring attention leaves its peer stuck in a recv and "
            "fr-analyze names that recv, the rank that never sent it and the rank stuck") {
    auto dump = titan::test::temp_dir("fr_p2p_skip_send");
    // Rank 0 never issues its first K/V send on the cp group: Gloo pairs each later message with the recv
    // before it, so rank 1's last recv of that stream is the one nobody answers.
    auto launched = launch_train(2, 29923, dump, "skip:rank=0:op=send:group=cp", " --set comm.train_timeout_seconds=60",
                                 "[{name: fsdp}, {name: context_parallel, context_parallel_rotate_method: alltoall}, "
                                 "{name: flight_recorder, watchdog_timeout_seconds: 15}]");
    INFO(launched.result.output);
    CHECK(launched.result.exit_code != 0);
    CHECK(launched.seconds < 150);
    for (int rank = 0; rank < 2; ++rank) REQUIRE_MESSAGE(has_dump(dump, rank), "no dump from rank ", rank);
    auto report = analyze_json(dump);
    INFO(report.dump(2));
    const nlohmann::json* unmatched = nullptr;
    for (const auto& finding : report["findings"]) {
      if (finding["kind"] == "unmatched_recv" && !unmatched) unmatched = &finding;
    }
    REQUIRE(unmatched != nullptr);
    CHECK((*unmatched)["group"].get<std::string>().rfind("cp/", 0) == 0);
    CHECK((*unmatched)["from"] == 0);
    CHECK((*unmatched)["to"] == 1);
    CHECK((*unmatched)["faulty_ranks"] == nlohmann::json::array({0}));
    CHECK((*unmatched)["stuck_ranks"] == nlohmann::json::array({1}));
    std::string summary = (*unmatched)["summary"].get<std::string>();
    CHECK(summary.find("rank 1 posted recv #") != std::string::npos);
    CHECK(summary.find("that rank 0 never sent") != std::string::npos);
    // "is stuck waiting for it", or "was stuck waiting for it until it failed" when rank 0 ended first.
    const bool waited = summary.find("rank 1 is stuck waiting for it") != std::string::npos ||
                        summary.find("rank 1 was stuck waiting for it until it failed") != std::string::npos;
    CHECK(waited);
  }

  TEST_CASE("flight recorder: bad options are refused naming the key") {
    auto result = run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() +
                              "/configs/llama3_debugmodel.yaml --set 'plugins=[{name: flight_recorder, buffer_size: 0}]'");
    CHECK(result.exit_code != 0);
    CHECK(result.output.find("buffer_size") != std::string::npos);
    CHECK(result.output.find("expected a positive number of entries") != std::string::npos);
  }
}
