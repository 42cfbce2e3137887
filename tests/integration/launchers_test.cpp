// Titan's ranks started by other launchers, as users start them: PyTorch's
// own torchrun (torch 2.11's, from .venv) with the c10d rendezvous on one
// host and across two (network namespaces, netns_hosts.hpp), and an
// srun-style environment (SLURM_* variables, rank 0's host taken from
// SLURM_NODELIST) across two hosts. Each FSDP run must train the
// single-process run's loss curve (within 1e-5, as data_parallel_test).
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <map>
#include <nlohmann/json.hpp>

#include "netns_hosts.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::has;
using titan::test::NetnsHosts;
using titan::test::run_command;
using titan::test::titan_binary;

const std::string kTorchrun = titan::test::source_dir() + "/.venv/bin/torchrun";

// FSDP (or one process when `ranks` is 1) over a global batch of 4.
std::string launched_train(const fs::path& dump, int ranks) {
  return titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.threads=1 --set lr_scheduler.warmup_steps=2"
         " --set metrics.log_freq=1 --set comm.init_timeout_seconds=60 --set training.steps=4"
         " --set training.local_batch_size=" + std::to_string(4 / ranks) +
         (ranks > 1 ? " --set 'plugins=[{name: fsdp}]'" : "") + " --set job.dump_folder=" + dump.string();
}

std::vector<double> launched_losses_of(const fs::path& dump) {
  std::vector<double> losses;
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) losses.push_back(nlohmann::json::parse(line)["loss_metrics/global_avg_loss"].get<double>());
  return losses;
}

// The launched run's losses against one process's, within 1e-5 relative.
void check_single_process_curve(const fs::path& dump, const std::string& name) {
  fs::path reference = titan::test::temp_dir(name + "_reference");
  auto single = run_command("timeout 120 " + launched_train(reference, 1));
  REQUIRE_MESSAGE(single.exit_code == 0, single.output);
  std::vector<double> expected = launched_losses_of(reference), got = launched_losses_of(dump);
  REQUIRE(expected.size() == 4);
  REQUIRE(got.size() == expected.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - expected[i]) / std::abs(expected[i]));
  MESSAGE(name << ": max relative loss difference vs one process: " << worst);
  CHECK(worst <= 1e-5);
}

bool have_torchrun() {
  if (run_command("test -x " + kTorchrun).exit_code == 0) return true;
  MESSAGE("TITAN_SKIPPED: " << kTorchrun << " not found (scripts/setup.sh installs it)");
  return false;
}

}  // namespace

TEST_CASE("torchrun: PyTorch's torchrun with --rdzv-backend c10d starts FSDP on 2 ranks of one host") {
  if (!have_torchrun()) return;
  fs::path dump = titan::test::temp_dir("torchrun_c10d_one_host");
  // The agent hosts the store on a free port it passes as MASTER_PORT.
  auto result = run_command("cd " + dump.string() + " && timeout 120 " + kTorchrun +
                            " --nnodes 1 --nproc_per_node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29983"
                            " --rdzv-id one_host --no-python " + launched_train(dump, 2));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(has(result.output, "joined 2 ranks (torchrun)"));
  CHECK(has(result.output, "gloo: interface lo (127.0.0.1)"));
  check_single_process_curve(dump, "torchrun_c10d_one_host");
}

TEST_CASE("torchrun: PyTorch's torchrun with --rdzv-backend c10d starts FSDP on 2 hosts x 1 rank") {
  if (!have_torchrun()) return;
  NetnsHosts hosts(2, "torchrun");
  if (!hosts.made()) {
    MESSAGE("TITAN_SKIPPED: " << hosts.reason());
    return;
  }
  fs::path dump = titan::test::temp_dir("torchrun_c10d_two_hosts");
  // Each agent names its own address (--local-addr): these hosts' common
  // host name resolves to loopback, which torchrun would hand out as
  // MASTER_ADDR. Host 0 hosts the rendezvous (is_host: torchrun cannot tell
  // from a host name that 10.231.0.1 is its own).
  std::vector<std::string> commands;
  for (int host = 0; host < 2; ++host) {
    commands.push_back("cd " + dump.string() + " && " + kTorchrun +
                       " --nnodes 2 --nproc_per_node 1 --rdzv-backend c10d --rdzv-endpoint " + hosts.address(0) +
                       ":29400 --rdzv-id two_hosts --local-addr " + hosts.address(host) +
                       (host == 0 ? " --rdzv-conf is_host=1" : "") + " --no-python " + launched_train(dump, 2));
  }
  auto results = hosts.run_all(commands, 120, titan::test::temp_dir("torchrun_c10d_two_hosts_logs"));
  for (int host = 0; host < 2; ++host) {
    INFO("host ", host, ":\n", results[host].output);
    REQUIRE(results[host].exit_code == 0);
    CHECK(has(results[host].output, "gloo: interface eth0 (" + hosts.address(host) + ")"));
  }
  CHECK(has(results[0].output, "joined 2 ranks (torchrun) through " + hosts.address(0)));
  check_single_process_curve(dump, "torchrun_c10d_two_hosts");
}

TEST_CASE("torchrun: without --local-addr where the host name is loopback, the job fails saying why the ranks "
          "cannot meet") {
  if (!have_torchrun()) return;
  NetnsHosts hosts(2, "torchrun_loopback");
  if (!hosts.made()) {
    MESSAGE("TITAN_SKIPPED: " << hosts.reason());
    return;
  }
  fs::path dump = titan::test::temp_dir("torchrun_loopback_master");
  // torchrun hands every rank MASTER_ADDR=localhost here (rank 0's host
  // name resolves to loopback): host 1's rank dials itself.
  std::vector<std::string> commands;
  for (int host = 0; host < 2; ++host) {
    commands.push_back("cd " + dump.string() + " && " + kTorchrun +
                       " --nnodes 2 --nproc_per_node 1 --rdzv-backend c10d --rdzv-endpoint " + hosts.address(0) +
                       ":29400 --rdzv-id loopback" + (host == 0 ? " --rdzv-conf is_host=1" : "") + " --no-python " +
                       launched_train(dump, 2) + " --set comm.init_timeout_seconds=4");
  }
  auto results = hosts.run_all(commands, 90, titan::test::temp_dir("torchrun_loopback_master_logs"));
  // Which host gets rank 0 is the rendezvous's choice: the rank on the
  // other one cannot reach the store, rank 0 its peer. Both fail at about
  // the same moment, and the first failure makes torchrun stop the other
  // before it may print: at least one of them tells why.
  std::string both = results[0].output + results[1].output;
  INFO(both);
  CHECK(results[0].exit_code != 0);
  CHECK(results[1].exit_code != 0);
  CHECK((has(both, "rank 1 could not join the job's TCPStore at localhost:") ||
         has(both, "rank 0 could not connect process group 'world' from interface lo (127.0.0.1)")));
  CHECK(has(both, "MASTER_ADDR localhost is loopback but the job has ranks on other hosts: give rank 0's host an "
                  "address the others reach (titan launch --master-addr, or torchrun --local-addr on each node)"));
}

TEST_CASE("slurm: an srun-style environment starts FSDP on 2 hosts x 2 tasks, rank 0's host from SLURM_NODELIST") {
  NetnsHosts hosts(2, "slurm");
  if (!hosts.made()) {
    MESSAGE("TITAN_SKIPPED: " << hosts.reason());
    return;
  }
  fs::path dump = titan::test::temp_dir("slurm_two_hosts");
  // What srun gives each task (no MASTER_ADDR: the first node of the list,
  // node0, which the hosts resolve to 10.231.0.1).
  std::vector<std::string> commands;
  for (int host = 0; host < 2; ++host) {
    std::string tasks;
    for (int local = 0; local < 2; ++local) {
      tasks += "env -u RANK -u WORLD_SIZE -u MASTER_ADDR SLURM_PROCID=" + std::to_string(host * 2 + local) +
               " SLURM_NTASKS=4 SLURM_LOCALID=" + std::to_string(local) +
               " SLURM_NTASKS_PER_NODE='2(x2)' SLURM_NODEID=" + std::to_string(host) +
               " SLURM_NODELIST='node[0-1]' SLURM_JOB_NODELIST='node[0-1]' MASTER_PORT=29500 " + launched_train(dump, 4) +
               " & p" + std::to_string(local) + "=$!; ";
    }
    commands.push_back(tasks + "a=0; wait $p0 || a=1; wait $p1 || a=1; exit $a");
  }
  auto results = hosts.run_all(commands, 120, titan::test::temp_dir("slurm_two_hosts_logs"));
  for (int host = 0; host < 2; ++host) {
    INFO("host ", host, ":\n", results[host].output);
    REQUIRE(results[host].exit_code == 0);
    CHECK(has(results[host].output, "gloo: interface eth0 (" + hosts.address(host) +
                                        ") (its address routes to MASTER_ADDR node0 (10.231.0.1))"));
  }
  CHECK(has(results[0].output, "joined 4 ranks (slurm) through node0:29500"));
  check_single_process_curve(dump, "slurm_two_hosts");
}
