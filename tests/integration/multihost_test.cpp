// Jobs across machines: hosts are network namespaces on one bridge
// (netns_hosts.hpp), each running `titan launch --nnodes 2 --node-rank R
// --master-addr <host 0>` as a user would on two machines. FSDP, HSDP, PP
// and a DCP save resumed on another layout each train the loss curve of
// the same job on one host's loopback (within 1e-5, as the loopback
// equivalence tests), with every rank on eth0; a store or a peer that
// cannot be reached ends the job within the init timeout, naming address,
// port and interface, without spinning. The hosts share this machine's
// file system, as nodes share a cluster file system for checkpoints.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>

#include "netns_hosts.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::CommandResult;
using titan::test::has;
using titan::test::NetnsHosts;
using titan::test::titan_binary;

#define REQUIRE_HOSTS(hosts)                                  \
  if (!(hosts).made()) {                                      \
    MESSAGE("TITAN_SKIPPED: " << (hosts).reason());           \
    return;                                                   \
  }

// A small Llama and a global batch of 4 windows, so a job takes seconds.
std::string multihost_train(const fs::path& dump, int steps, int local_batch, const std::string& plugins,
                  const std::string& extra = "") {
  return titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.threads=1 --set lr_scheduler.warmup_steps=2"
         " --set metrics.log_freq=1 --set comm.init_timeout_seconds=60 --set training.steps=" +
         std::to_string(steps) + " --set training.local_batch_size=" + std::to_string(local_batch) +
         " --set 'plugins=[" + plugins + "]' --set job.dump_folder=" + dump.string() + extra;
}

// Every rank under one launcher: the job on one host's loopback.
std::string on_loopback(int ranks, const std::string& command) {
  return titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) + " --grace-period-s 5 -- " + command;
}

// This host's share of a job over `nnodes` hosts (default: all), rank 0's
// store on host 0.
std::string on_node(const NetnsHosts& hosts, int node, int nproc, const std::string& command, int nnodes = 0) {
  return titan_binary() + " launch --nnodes " + std::to_string(nnodes > 0 ? nnodes : hosts.size()) + " --node-rank " +
         std::to_string(node) + " --nproc-per-node " + std::to_string(nproc) + " --master-addr " +
         hosts.address(0) + " --master-port 29500 --grace-period-s 5 -- " + command;
}

std::map<int64_t, double> multihost_losses_of(const fs::path& dump) {
  std::map<int64_t, double> losses;
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    losses[record["step"].get<int64_t>()] = record["loss_metrics/global_avg_loss"].get<double>();
  }
  return losses;
}

// The steps of `across` follow `loopback`'s curve within 1e-5 relative.
void check_same_curve(const std::map<int64_t, double>& across, const std::map<int64_t, double>& loopback,
                      size_t steps) {
  REQUIRE(across.size() == steps);
  double worst = 0;
  for (const auto& [step, loss] : across) {
    REQUIRE_MESSAGE(loopback.count(step), "step ", step, " is not in the loopback run");
    double reference = loopback.at(step);
    worst = std::max(worst, std::abs(loss - reference) / std::max(std::abs(reference), 1e-12));
  }
  MESSAGE("max relative loss difference across hosts vs loopback: " << worst);
  CHECK(worst <= 1e-5);
}

// Runs the job on host 0's loopback, then across the hosts with `nproc`
// ranks each; checks that each host's ranks used its eth0.
struct TwoRuns {
  std::map<int64_t, double> loopback, across;
};
TwoRuns run_both(const NetnsHosts& hosts, const std::string& name, int nproc,
                 const std::function<std::string(const fs::path&)>& command) {
  fs::path logs = titan::test::temp_dir(name + "_logs");
  fs::path loopback_dump = titan::test::temp_dir(name + "_loopback");
  auto local = hosts.run_all({on_loopback(hosts.size() * nproc, command(loopback_dump))}, 120, logs / "loopback");
  REQUIRE_MESSAGE(local[0].exit_code == 0, local[0].output);
  CHECK_MESSAGE(has(local[0].output, "gloo: interface lo (127.0.0.1)"), local[0].output);
  fs::path across_dump = titan::test::temp_dir(name + "_across");
  std::vector<std::string> commands;
  for (int host = 0; host < hosts.size(); ++host) commands.push_back(on_node(hosts, host, nproc, command(across_dump)));
  auto results = hosts.run_all(commands, 120, logs);
  for (int host = 0; host < hosts.size(); ++host) {
    const CommandResult& result = results[host];
    REQUIRE_MESSAGE(result.exit_code == 0, "host ", host, ":\n", result.output);
    std::string chosen = "gloo: interface eth0 (" + hosts.address(host) + ") (its address routes to MASTER_ADDR " +
                         hosts.address(0) + ")";
    CHECK_MESSAGE(has(result.output, chosen), chosen, " not in host ", host, "'s log:\n", result.output);
  }
  return {multihost_losses_of(loopback_dump), multihost_losses_of(across_dump)};
}

}  // namespace

TEST_CASE("multihost: FSDP on 2 hosts x 1 rank trains the loopback curve, and its DCP save resumes as HSDP on "
          "2 hosts x 2 ranks on the same curve") {
  NetnsHosts hosts(2, "fsdp");
  REQUIRE_HOSTS(hosts);
  const std::string checkpoint = " --set checkpoint.enable=true --set checkpoint.interval=3 --set checkpoint.keep_latest_k=0";
  TwoRuns fsdp = run_both(hosts, "multihost_fsdp", 1, [&](const fs::path& dump) {
    return multihost_train(dump, 6, 2, "{name: fsdp}", checkpoint);
  });
  check_same_curve(fsdp.across, fsdp.loopback, 6);
  // Step 3 of the run across hosts, resumed by 2 x 2 ranks that replicate
  // across the hosts and shard within each.
  fs::path dump = titan::test::temp_dir("multihost_resume_hsdp");
  fs::create_directories(dump / "checkpoint");
  fs::copy(titan::test::temp_path("multihost_fsdp_across") / "checkpoint/step-3", dump / "checkpoint/step-3",
           fs::copy_options::recursive);
  std::string command = multihost_train(dump, 6, 1, "{name: fsdp, dp_replicate: 2}", checkpoint);
  auto results = hosts.run_all({on_node(hosts, 0, 2, command), on_node(hosts, 1, 2, command)}, 120,
                               titan::test::temp_dir("multihost_resume_hsdp_logs"));
  REQUIRE_MESSAGE(results[0].exit_code == 0, results[0].output, results[1].output);
  REQUIRE_MESSAGE(results[1].exit_code == 0, results[1].output);
  CHECK_MESSAGE(has(results[0].output, "resumed from checkpoint at step 3"), results[0].output);
  check_same_curve(multihost_losses_of(dump), fsdp.loopback, 3);
}

TEST_CASE("multihost: HSDP on 2 hosts x 2 ranks (replicate across hosts, shard within) trains the loopback curve") {
  NetnsHosts hosts(2, "hsdp");
  REQUIRE_HOSTS(hosts);
  // dp_replicate is the outer mesh dim: ranks {0,1} and {2,3} (one host
  // each) shard together; {0,2} and {1,3} all-reduce across the link.
  TwoRuns hsdp = run_both(hosts, "multihost_hsdp", 2, [](const fs::path& dump) {
    return multihost_train(dump, 4, 1, "{name: fsdp, dp_replicate: 2}");
  });
  check_same_curve(hsdp.across, hsdp.loopback, 4);
}

TEST_CASE("multihost: PP with its 2 stages on 2 hosts trains the loopback curve") {
  NetnsHosts hosts(2, "pp");
  REQUIRE_HOSTS(hosts);
  TwoRuns pp = run_both(hosts, "multihost_pp", 1, [](const fs::path& dump) {
    return multihost_train(dump, 4, 4,
                 "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: 1F1B, "
                 "pipeline_parallel_microbatch_size: 1}");
  });
  check_same_curve(pp.across, pp.loopback, 4);
}

TEST_CASE("multihost: a store or a peer that cannot be reached ends the job within the init timeout, naming the "
          "address, port and interface, without spinning") {
  NetnsHosts hosts(3, "unreachable");
  REQUIRE_HOSTS(hosts);
  // Host 1's Gloo on a second interface (one end of a veth pair inside
  // host 1), whose network host 0 has no route to: the store is reached
  // over eth0, the peer is not. Gloo's lower address listens and the higher
  // connects, so host 0 (10.231.0.1) dials 10.230.0.2 and fails at once;
  // host 1 waits for a connection that never comes.
  const std::string& host1 = hosts.name(1);
  auto second = titan::test::run_command("ip -n " + host1 + " link add x0 type veth peer name x1 && ip -n " + host1 +
                                         " addr add 10.230.0.2/24 dev x0 && ip -n " + host1 + " link set x1 up && ip -n " +
                                         host1 + " link set x0 up");
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  const int timeout_s = 4;
  fs::path dump = titan::test::temp_dir("multihost_unreachable");
  std::string command = multihost_train(dump, 2, 2, "{name: fsdp}", " --set comm.init_timeout_seconds=" + std::to_string(timeout_s));
  // bash's `time`: wall and CPU seconds of everything the command ran.
  auto timed = [](const std::string& line) {
    return "exec bash -c " + NetnsHosts::quoted("TIMEFORMAT='TIMES cpu %U %S wall %R'; time " + line);
  };
  // Host 2 joins a job whose store would be at 10.231.0.9, where no host is.
  // The ranks run without titan launch, so that each one's own timeout is
  // seen (under the launchers, host 0's failure would stop host 1's rank).
  std::string lost = "RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.231.0.9 MASTER_PORT=29500 " + command;
  auto rank = [&](int r) {
    return "RANK=" + std::to_string(r) + " WORLD_SIZE=2 MASTER_ADDR=" + hosts.address(0) + " MASTER_PORT=29500 " + command;
  };
  auto results = hosts.run_all({timed(rank(0)), timed("GLOO_SOCKET_IFNAME=x0 " + rank(1)), timed(lost)},
                               120, titan::test::temp_dir("multihost_unreachable_logs"));
  struct Expected {
    const char* who;
    std::vector<std::string> named;
  };
  const Expected expected[] = {
      {"rank 0 (host 0), whose peer advertised an unroutable address",
       {"could not connect process group 'world' from interface eth0 (10.231.0.1) to its peers (rank 1 on "
        "interface x0 (10.230.0.2))"}},
      {"rank 1 (host 1), whose peer cannot reach it", {"could not connect process group 'world' from interface x0 "
                                                        "(10.230.0.2)"}},
      {"a rank whose store is on no host", {"10.231.0.9:29500", "interface eth0 (10.231.0.3)", "TCPStore"}},
  };
  for (int host = 0; host < 3; ++host) {
    const std::string& output = results[host].output;
    INFO(std::string(expected[host].who), ":\n", output);
    CHECK(results[host].exit_code != 0);
    for (const auto& part : expected[host].named) CHECK_MESSAGE(has(output, part), "missing '", part, "'");
    auto at = output.rfind("TIMES cpu ");
    REQUIRE(at != std::string::npos);
    double user = 0, system = 0, wall = 0;
    REQUIRE(std::sscanf(output.c_str() + at, "TIMES cpu %lf %lf wall %lf", &user, &system, &wall) == 3);
    MESSAGE(std::string(expected[host].who) << ": failed after " << wall << " s wall, " << user + system << " s CPU");
    // Start-up (~2 s) + the timeout + the launcher's grace period.
    CHECK(wall < timeout_s + 15);
    // Waiting must sleep: a retry loop at full speed would burn the whole
    // wait in CPU time (start-up alone costs about a second).
    CHECK(user + system < 0.5 * wall + 1.0);
  }
}

// Whole-job restarts across hosts: the launchers meet in node 0's
// launcher's store (--rdzv-port), so a failure on one host stops and
// restarts every host's ranks together, and a host that does not come back
// ends the job on the others, named.
namespace {

std::string restartable(const NetnsHosts& hosts, int node, const std::string& command, const std::string& options) {
  return titan_binary() + " launch --nnodes " + std::to_string(hosts.size()) + " --node-rank " + std::to_string(node) +
         " --nproc-per-node 1 --master-addr " + hosts.address(0) +
         " --master-port 29500 --grace-period-s 2 --monitor-interval-ms 100 " + options + " -- " + command;
}

// Round 0 only: the command with `extra` appended (a fault), later rounds
// without it.
std::string in_round_0(const std::string& extra, const std::string& command) {
  return "sh -c 'if [ \"$TITAN_RESTART_COUNT\" = 0 ]; then exec \"$0\" \"$@\" " + extra +
         "; else exec \"$0\" \"$@\"; fi' " + command;
}

const char* kRestartCheckpoints =
    " --set checkpoint.enable=true --set checkpoint.interval=2 --set checkpoint.keep_latest_k=0"
    " --set comm.train_timeout_seconds=10";

}  // namespace

TEST_CASE("multihost: a rank killed on host 1 restarts both hosts' ranks together, which resume on the "
          "uninterrupted curve bit for bit") {
  NetnsHosts hosts(2, "restart");
  REQUIRE_HOSTS(hosts);
  auto job = [](const fs::path& dump) { return multihost_train(dump, 6, 2, "{name: fsdp}", kRestartCheckpoints); };
  fs::path straight = titan::test::temp_dir("multihost_restart_straight");
  auto reference = hosts.run_all({restartable(hosts, 0, job(straight), "--max-restarts 1"),
                                  restartable(hosts, 1, job(straight), "--max-restarts 1")},
                                 120, titan::test::temp_dir("multihost_restart_straight_logs"));
  REQUIRE_MESSAGE(reference[0].exit_code == 0, reference[0].output, reference[1].output);
  REQUIRE_MESSAGE(reference[1].exit_code == 0, reference[1].output);
  // Host 1's rank SIGKILLs itself after step 3 in round 0.
  fs::path dump = titan::test::temp_dir("multihost_restart");
  std::string crash = "--set debug.crash_rank=1 --set debug.crash_at_step=3";
  auto results = hosts.run_all({restartable(hosts, 0, in_round_0(crash, job(dump)), "--max-restarts 1"),
                                restartable(hosts, 1, in_round_0(crash, job(dump)), "--max-restarts 1")},
                               120, titan::test::temp_dir("multihost_restart_logs"));
  INFO("host 0:\n", results[0].output, "\nhost 1:\n", results[1].output);
  REQUIRE(results[0].exit_code == 0);
  REQUIRE(results[1].exit_code == 0);
  // Host 1's rank dies first; host 0's rank fails on the lost connection
  // at about the same time, so either launcher may announce round 0's
  // failure first, and the other learns it from the store or its own rank.
  CHECK(has(results[1].output, "rank 1 (pid"));
  CHECK(has(results[1].output, "was killed by signal 9 (SIGKILL)"));
  CHECK((has(results[0].output, "told the other nodes that round 0 failed") ||
         has(results[0].output, "round 0 failed on node 1 (10.231.0.2)")));
  for (const auto& result : results) {
    CHECK(has(result.output, "joining round 1 with the other 1 node"));
    CHECK(has(result.output, "restarting all 1 rank of this node (attempt 1 of 1)"));
  }
  CHECK(has(results[0].output, "resumed from checkpoint at step 2"));
  auto expected = multihost_losses_of(straight);
  auto losses = multihost_losses_of(dump);  // the restart's lines win
  REQUIRE(losses.size() == 6);
  for (const auto& [step, loss] : losses) CHECK_MESSAGE(loss == expected.at(step), "step ", step);  // exact

  // Host 1's cable is pulled once step 3 is logged, mid-collective of step
  // 4, for longer than comm.train_timeout_seconds (4 s): both ranks time
  // out naming their peer and the flight recorder dumps; host 1's launcher
  // reaches node 0's store again once the cable is back (within
  // --rdzv-timeout-s), and both hosts restart together from step 2.
  fs::path cut = titan::test::temp_dir("multihost_link_down");
  std::string with_recorder = multihost_train(cut, 6, 2, "{name: fsdp}, {name: flight_recorder}",
                                    " --set checkpoint.enable=true --set checkpoint.interval=2"
                                    " --set checkpoint.keep_latest_k=0 --set comm.train_timeout_seconds=4");
  double down_at = -1, up_at = -1;
  auto started = std::chrono::steady_clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  std::thread cable([&] {
    while (since_start() < 90 && !has(titan::test::read_file(cut / "metrics.jsonl"), "\"step\":3,")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    hosts.set_link(1, false);
    down_at = since_start();
    std::this_thread::sleep_for(std::chrono::seconds(6));
    hosts.set_link(1, true);
    up_at = since_start();
  });
  auto link_down = hosts.run_all({restartable(hosts, 0, with_recorder, "--max-restarts 1 --rdzv-timeout-s 40"),
                                  restartable(hosts, 1, with_recorder, "--max-restarts 1 --rdzv-timeout-s 40")},
                                 150, titan::test::temp_dir("multihost_link_down_logs"));
  cable.join();
  INFO("link down at ", down_at, " s, up at ", up_at, " s\nhost 0:\n", link_down[0].output, "\nhost 1:\n",
       link_down[1].output);
  REQUIRE(down_at > 0);
  CHECK(link_down[0].exit_code == 0);
  CHECK(link_down[1].exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK_MESSAGE(fs::exists(cut / "flight_recorder" / ("rank_" + std::to_string(rank) + ".json")), "rank ", rank);
  }
  // Each side names the group, the op and the host across the cut.
  CHECK(has(link_down[0].output, "' (rank 0 of 2) failed: "));
  CHECK(has(link_down[0].output, "the group's other ranks: rank 1 on interface eth0 (10.231.0.2)"));
  CHECK(has(link_down[1].output, "the group's other ranks: rank 0 on interface eth0 (10.231.0.1)"));
  for (const auto& result : link_down) CHECK(has(result.output, "joining round 1 with the other 1 node"));
  CHECK(has(link_down[0].output, "resumed from checkpoint at step 2"));
  auto after_cut = multihost_losses_of(cut);
  REQUIRE(after_cut.size() == 6);
  for (const auto& [step, loss] : after_cut) CHECK_MESSAGE(loss == expected.at(step), "step ", step);  // exact
}

TEST_CASE("multihost: a host whose launcher dies mid-run ends the job on the other host within the rendezvous "
          "timeout, naming it; so do exhausted restarts") {
  NetnsHosts hosts(2, "lost");
  REQUIRE_HOSTS(hosts);
  const double rdzv_timeout_s = 4;
  std::string options = "--max-restarts 1 --rdzv-timeout-s " + std::to_string(rdzv_timeout_s);
  fs::path dump = titan::test::temp_dir("multihost_lost");
  std::string command = multihost_train(dump, 6, 2, "{name: fsdp}", kRestartCheckpoints);
  // Host 1: its rank kills itself after step 2 and the shell around it
  // SIGKILLs host 1's launcher before it can reap the rank: the host is
  // gone without a word. Host 0's rank loses its peer, host 0's launcher
  // announces round 0 failed and waits in round 1 for a node that never
  // comes.
  std::string lost = "sh -c '\"$0\" \"$@\" --set debug.crash_rank=1 --set debug.crash_at_step=2; kill -9 $PPID' " + command;
  auto started = std::chrono::steady_clock::now();
  auto results = hosts.run_all({restartable(hosts, 0, command, options), restartable(hosts, 1, lost, options)},
                               120, titan::test::temp_dir("multihost_lost_logs"));
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO("host 0:\n", results[0].output, "\nhost 1:\n", results[1].output);
  CHECK(results[1].exit_code == 137);  // SIGKILLed, as intended
  CHECK(results[0].exit_code == 1);
  CHECK(has(results[0].output, "node 1 (10.231.0.2) did not join round 1 of the job within --rdzv-timeout-s (4 s)"));
  MESSAGE("host 0 ended " << elapsed << " s after the start");
  CHECK(elapsed < 25);  // start-up, 2 steps, the peer's failure, the 4 s wait

  // Host 0's launcher dies the same way: it hosted the launchers' store, so
  // host 1's launcher ends the job saying so.
  fs::path dump0 = titan::test::temp_dir("multihost_lost0");
  std::string command0 = multihost_train(dump0, 6, 2, "{name: fsdp}", kRestartCheckpoints);
  std::string lost0 = "sh -c '\"$0\" \"$@\" --set debug.crash_rank=0 --set debug.crash_at_step=2; kill -9 $PPID' " + command0;
  auto node0_gone = hosts.run_all({restartable(hosts, 0, lost0, options), restartable(hosts, 1, command0, options)}, 120,
                                  titan::test::temp_dir("multihost_lost0_logs"));
  INFO("node 0 gone, host 0:\n", node0_gone[0].output, "\nhost 1:\n", node0_gone[1].output);
  CHECK(node0_gone[0].exit_code == 137);
  CHECK(node0_gone[1].exit_code == 1);
  CHECK(has(node0_gone[1].output, "lost the launchers' rendezvous store at 10.231.0.1:29501"));
  CHECK(has(node0_gone[1].output, "node 0's launcher, which hosts it, is gone or cannot be reached; the job ends"));

  // Both hosts' ranks fail in round 0 and round 1 (--max-restarts 1): both
  // launchers restart once, then end, naming the last failure.
  fs::path always = titan::test::temp_dir("multihost_exhausted");
  std::string failing = multihost_train(always, 6, 2, "{name: fsdp}", " --set debug.crash_rank=1 --set debug.crash_at_step=1");
  auto exhausted = hosts.run_all({restartable(hosts, 0, failing, options), restartable(hosts, 1, failing, options)},
                                 120, titan::test::temp_dir("multihost_exhausted_logs"));
  INFO("exhausted, host 0:\n", exhausted[0].output, "\nhost 1:\n", exhausted[1].output);
  for (const auto& result : exhausted) {
    CHECK(result.exit_code == 1);
    CHECK(has(result.output, "restarting all 1 rank of this node (attempt 1 of 1)"));
    CHECK(has(result.output, "no restarts left (--max-restarts 1)"));
  }
}
