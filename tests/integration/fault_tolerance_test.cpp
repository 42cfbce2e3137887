// Fault tolerance across replica groups with torchft's real Lighthouse
// (scripts/lighthouse.py runs torchft 0.2.0's own server): groups are
// separate `titan train` processes; one is killed in the middle of a step,
// the others discard that step and go on without it, and its relaunch heals
// from a peer and rejoins. PyTorch eager replays the same membership
// history (tests/python/llama3_reference.py --members) as the reference.
#include "doctest_torch.hpp"
#include "equivalence_runs.hpp"
#include "netns_hosts.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using titan::test::has;
using titan::test::read_file;
using titan::test::relative;
using titan::test::run_command;
using titan::test::source_dir;

// A command in the background, its output in a file, killed when dropped.
struct Background {
  pid_t pid = 0;
  fs::path log;
  Background(const std::string& command, fs::path log_path) : log(std::move(log_path)) {
    const std::string line = "cd " + source_dir() + " && exec " + command + " > " + log.string() + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
    REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  }
  ~Background() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  std::optional<int> wait(double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (Clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  std::string output() const { return read_file(log); }
};

// Where replica group `id` writes its own files inside its job.dump_folder.
fs::path group_files(const fs::path& dump, int id) { return dump / ("ft-replica-" + std::to_string(id)); }

std::vector<nlohmann::json> metrics_of(const fs::path& dump) {
  std::vector<nlohmann::json> lines;
  if (!fs::exists(dump / "metrics.jsonl")) return lines;
  std::stringstream text(read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(text, line);) {
    if (!line.empty() && line.back() == '}') lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

bool wait_until(const std::function<bool()>& ready, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The replay script's one JSON line (the last that opens with '{').
nlohmann::json last_json(const std::string& output) {
  std::string json;
  std::stringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json = line;
  }
  REQUIRE_MESSAGE(!json.empty(), output);
  return nlohmann::json::parse(json);
}

// The metrics of the first of `dumps` that trained every step (a group that
// joined late, after step 1, healed into the run and logged fewer).
std::vector<nlohmann::json> complete_metrics(const std::vector<fs::path>& dumps, int steps) {
  for (const auto& dump : dumps) {
    auto metrics = metrics_of(dump);
    if (metrics.size() == static_cast<size_t>(steps)) return metrics;
  }
  FAIL("no group logged all " << steps << " steps");
  return {};
}

std::string python() { return source_dir() + "/.venv/bin/python"; }

// Without .venv's Python (torch, torchft) the test reports itself skipped.
bool python_missing() {
  if (run_command("test -x " + python()).exit_code == 0) return false;
  MESSAGE("TITAN_SKIPPED: " << python() << " not found (scripts/setup.sh installs torch and torchft into .venv)");
  return true;
}

// torchft's Lighthouse on `port`: a dead group is dropped after 1.5 s
// without a heartbeat; stragglers are waited for 10 s.
std::string lighthouse_command(int port, int min_replicas, const std::string& host = "127.0.0.1") {
  return python() + " scripts/lighthouse.py --min_replicas " + std::to_string(min_replicas) + " --bind " + host +
         ":" + std::to_string(port) + " --join_timeout_ms 10000 --heartbeat_timeout_ms 1500 --quorum_tick_ms 20";
}

// The model and optimizer of tests/integration/pytorch_reference_test.cpp,
// spelled out for both sides.
const std::string kModel = " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4 --set model.n_kv_heads=2"
                           " --set model.max_seq_len=32 --set training.seed=7 --set training.seq_len=32"
                           " --set training.local_batch_size=2 --set training.threads=1 --set training.max_norm=1"
                           " --set optimizer.lr=0.003 --set optimizer.beta1=0.9 --set optimizer.beta2=0.95"
                           " --set optimizer.eps=1e-8 --set optimizer.weight_decay=0.1"
                           " --set lr_scheduler.warmup_steps=3 --set lr_scheduler.decay_type=linear"
                           " --set lr_scheduler.min_lr_factor=0.1 --set metrics.log_freq=1 --set metrics.peak_flops=1e12";

// `launch`: how the group starts, e.g. "titan launch --nproc-per-node 2 ... --"; empty: one rank.
std::string group_command(int id, int groups, int min_size, int port, const fs::path& tokens, const fs::path& hf,
                          const fs::path& dump, int steps, const std::string& launch = "",
                          const std::string& config = "llama3_debugmodel.yaml",
                          const std::string& address = "127.0.0.1", const std::string& lighthouse_host = "127.0.0.1") {
  return launch + titan::test::titan_binary() + " train configs/" + config + kModel +
         " --set training.dataset_path=" + tokens.string() + " --set training.steps=" + std::to_string(steps) +
         (hf.empty() ? "" : " --set checkpoint.initial_load_path=" + hf.string()) +
         " --set job.dump_folder=" + dump.string() +
         " --set debug.save_final_model=" + (group_files(dump, id) / "final.pt").string() +
         " --set fault_tolerance.enable=true --set fault_tolerance.replica_id=" + std::to_string(id) +
         " --set fault_tolerance.group_size=" + std::to_string(groups) +
         " --set fault_tolerance.min_replica_size=" + std::to_string(min_size) +
         " --set fault_tolerance.lighthouse=http://" + lighthouse_host + ":" + std::to_string(port) +
         " --set fault_tolerance.address=" + address + " --set fault_tolerance.timeout_seconds=5";
}

// Ids with a pattern to learn, below 97 (the shipped tokenizer has 1444).
void write_tokens(const fs::path& path, int64_t count) {
  std::vector<uint16_t> ids(static_cast<size_t>(count));
  uint32_t state = 99;
  for (size_t i = 0; i < ids.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    ids[i] = static_cast<uint16_t>(((i >= 2 ? ids[i - 2] : 1) * 37 + 11 + (state >> 30)) % 97);
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
}

// Initial weights both sides load: Titan's init after one step, as HF.
fs::path initial_weights(const fs::path& dir, const fs::path& tokens) {
  const std::string titan = titan::test::titan_binary();
  auto result = run_command("cd " + source_dir() + " && timeout 120 " + titan + " train configs/llama3_debugmodel.yaml" +
                            kModel + " --set training.dataset_path=" + tokens.string() +
                            " --set training.steps=1 --set checkpoint.enable=true --set checkpoint.interval=1"
                            " --set job.dump_folder=" + (dir / "init").string());
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  result = run_command("cd " + source_dir() + " && timeout 120 " + titan + " checkpoint export " +
                       (dir / "init/checkpoint/step-1").string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  return dir / "hf";
}

// PyTorch eager replaying the groups' training (tests/python/llama3_reference.py,
// the optimizer of kModel) from `hf` on `tokens`, each group `batch`
// sequences a step; `members`: each step's groups as bit masks (empty: all).
// Its JSON result, final_param_rel_diff against `titan_final`.
nlohmann::json pytorch_replay(const fs::path& hf, const fs::path& tokens, int batch, int steps, int groups,
                              const std::string& members, const fs::path& titan_final) {
  auto result = run_command("cd " + source_dir() + " && timeout 300 " + python() +
                            " tests/python/llama3_reference.py --hf " + hf.string() + " --tokens " + tokens.string() +
                            " --batch " + std::to_string(batch) + " --seq 32 --steps " + std::to_string(steps) +
                            " --lr 0.003 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --warmup-steps 3"
                            " --decay-type linear --min-lr-factor 0.1 --max-norm 1 --threads 1 --replica-groups " +
                            std::to_string(groups) + (members.empty() ? "" : " --members " + members) +
                            " --titan-final " + titan_final.string());
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  return last_json(result.output);
}

double worst_parameter(const nlohmann::json& reference) {
  double worst = 0;
  for (const auto& [name, diff] : reference["final_param_rel_diff"].items()) worst = std::max(worst, diff.get<double>());
  return worst;
}

// step -> each MoE router's logged imbalance (max / mean tokens per expert).
std::map<int, std::map<std::string, double>> moe_imbalances(const fs::path& folder) {
  std::map<int, std::map<std::string, double>> out;
  for (const auto& m : metrics_of(folder)) {
    for (const auto& [key, value] : m.items()) {
      if (key.rfind("moe/", 0) == 0 && key.find("/imbalance") != std::string::npos) {
        out[m["step"].get<int>()][key] = value.get<double>();
      }
    }
  }
  return out;
}

// Two replica groups of `ranks` ranks each (`config`: the config file and its
// --sets; training.local_batch_size `batch`), under min_replica_size 2 so
// that no step is ever taken alone, against one process with the whole batch
// of both groups, `reference_batch` (the config with 'plugins=[]'). `killed`: group 1's rank 0 dies in this
// step's backward pass (first attempt) and its launcher restarts it.
// Gradient norms and final parameters within 1e-5; returns the worst
// parameter difference of `watched` (a tensor named by the caller).
double groups_against_one_process(const std::string& name, const std::string& config, int ranks, int batch,
                                  int reference_batch, int port, int master_port, int killed,
                                  const std::string& watched) {
  const fs::path dir = titan::test::temp_dir(name);
  auto reference_run = run_command("cd " + source_dir() + " && timeout 300 " + titan::test::titan_binary() +
                                   " train " + config + " --set 'plugins=[]' --set training.local_batch_size=" +
                                   std::to_string(reference_batch) + titan::test::common_sets(dir / "reference"));
  REQUIRE_MESSAGE(reference_run.exit_code == 0, reference_run.output);
  const titan::test::RunOutput reference = titan::test::read_run(dir / "reference");

  Background lighthouse(lighthouse_command(port, 1), dir / "lighthouse.log");
  std::vector<std::unique_ptr<Background>> runs;
  for (int id = 0; id < 2; ++id) {
    const fs::path dump = dir / ("group" + std::to_string(id));
    const std::string signal =
        id == 1 && killed > 0 ? "env TITAN_TEST_SIGNAL=KILL:rank=0:phase=backward:step=" + std::to_string(killed) + " "
                              : "";
    runs.push_back(std::make_unique<Background>(
        signal + titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) +
            " --max-restarts 1 --grace-period-s 2 --master-port " + std::to_string(master_port + 2 * id) + " -- " +
            titan::test::titan_binary() + " train " + config + " --set training.local_batch_size=" +
            std::to_string(batch) + titan::test::common_sets(dump) +
            " --set debug.save_final_model=" + (group_files(dump, id) / "final.pt").string() +
            " --set fault_tolerance.enable=true --set fault_tolerance.replica_id=" + std::to_string(id) +
            " --set fault_tolerance.group_size=2 --set fault_tolerance.min_replica_size=2"
            " --set fault_tolerance.lighthouse=http://127.0.0.1:" + std::to_string(port) +
            " --set fault_tolerance.address=127.0.0.1 --set fault_tolerance.timeout_seconds=5",
        dir / ("group" + std::to_string(id) + ".log")));
  }
  for (auto& run : runs) REQUIRE_MESSAGE(run->wait(180) == 0, run->output());
  // The survivor trained through it: no rank of group 0 died (a write to a
  // dead peer's socket once killed one with SIGPIPE), so its launcher never restarted.
  CHECK_MESSAGE(!has(runs[0]->output(), "titan launch: restarting"), runs[0]->output());
  if (killed > 0) {
    CHECK_MESSAGE(has(runs[0]->output(), "step discarded"), runs[0]->output());
    CHECK_MESSAGE(has(runs[1]->output(), "fault tolerance: healed from titan_ft_0"), runs[1]->output());
  }
  CHECK(read_file(group_files(dir / "group1", 1) / "final.pt") ==
        read_file(group_files(dir / "group0", 0) / "final.pt"));

  const titan::test::RunOutput ft = titan::test::read_run(group_files(dir / "group0", 0));
  REQUIRE(ft.grad_norms.size() == reference.grad_norms.size());
  double worst_norm = 0, worst_param = 0;
  for (size_t i = 0; i < ft.grad_norms.size(); ++i) {
    worst_norm = std::max(worst_norm, relative(ft.grad_norms[i], reference.grad_norms[i]));
  }
  for (const auto& item : reference.params) {
    const at::Tensor mine = ft.params.at(item.key());
    worst_param = std::max(worst_param, (mine - item.value()).norm().item<double>() /
                                            std::max(item.value().norm().item<double>(), 1e-12));
  }
  // A MoE model's routing, step by step: the groups' summed counts are the
  // one process's counts.
  const auto imbalances = moe_imbalances(group_files(dir / "group0", 0));
  CHECK(imbalances == moe_imbalances(dir / "reference"));
  if (!imbalances.empty()) CHECK(imbalances.size() == reference.grad_norms.size());
  const at::Tensor expected = reference.params.at(watched);
  const double watched_diff = (ft.params.at(watched) - expected).norm().item<double>();
  MESSAGE(name << ": two replica groups against one process: grad norm " << worst_norm << ", parameters "
               << worst_param << ", " << watched << " off by " << watched_diff << " (its norm "
               << expected.norm().item<double>() << ")");
  CHECK(worst_norm <= 1e-5);
  CHECK(worst_param <= 1e-5);
  return watched_diff;
}


}  // namespace

TEST_SUITE("fault tolerance") {
  TEST_CASE("fault tolerance: of 3 replica groups under torchft's Lighthouse, one killed in a backward pass: the "
            "others discard that step and train on, its relaunch heals from a peer and rejoins, every group ends "
            "with the same parameters, and PyTorch replaying the membership history agrees") {
    if (python_missing()) return;
    const int port = 28711, steps = 16, groups = 3;
    const fs::path dir = titan::test::temp_dir("fault_tolerance_kill");
    const fs::path tokens = dir / "tokens.u16";
    write_tokens(tokens, int64_t{steps} * groups * 2 * 33);
    const fs::path hf = initial_weights(dir, tokens);

    Background lighthouse(lighthouse_command(port, 2), dir / "lighthouse.log");
    std::vector<std::unique_ptr<Background>> runs;
    for (int id = 0; id < groups; ++id) {
      // Group 2 dies in the backward pass of step 4 (TITAN_TEST_SIGNAL, first attempt only).
      const std::string signal = id == 2 ? "env TITAN_TEST_SIGNAL=KILL:rank=0:phase=backward:step=4 " : "";
      runs.push_back(std::make_unique<Background>(
          signal + group_command(id, groups, 2, port, tokens, hf, dir / ("group" + std::to_string(id)), steps),
          dir / ("group" + std::to_string(id) + ".log")));
    }
    REQUIRE_MESSAGE(runs[2]->wait(120) == 128 + SIGKILL, runs[2]->output());
    // The survivors train without it (a step of groups 0 and 1 only), then
    // hold still while it is relaunched, so that it is back before they finish.
    REQUIRE_MESSAGE(wait_until([&] {
                      for (const auto& m : metrics_of(group_files(dir / "group1", 1))) {
                        if (m["step"].get<int>() >= 4 && m.value("ft_replica_mask", 0.0) == 3) return true;
                      }
                      return false;
                    }, 60), runs[1]->output());
    kill(runs[0]->pid, SIGSTOP);
    kill(runs[1]->pid, SIGSTOP);
    Background relaunched(group_command(2, groups, 2, port, tokens, hf, dir / "group2_relaunched", steps),
                          dir / "group2_relaunched.log");
    REQUIRE_MESSAGE(wait_until([&] { return has(relaunched.output(), "fault tolerance: replica group"); }, 60),
                    relaunched.output());
    kill(runs[0]->pid, SIGCONT);
    kill(runs[1]->pid, SIGCONT);
    REQUIRE_MESSAGE(runs[0]->wait(120) == 0, runs[0]->output());
    REQUIRE_MESSAGE(runs[1]->wait(120) == 0, runs[1]->output());
    REQUIRE_MESSAGE(relaunched.wait(120) == 0, (relaunched.output() + lighthouse.output()));

    const std::string survivor = runs[0]->output();
    CHECK_MESSAGE(has(survivor, "step discarded"), survivor);
    // The cross-group group is built again only when the quorum changes
    // (the start, the loss, the return), not at every step's quorum.
    size_t joins = 0;
    for (size_t at = survivor.find("joined the replica groups"); at != std::string::npos;
         at = survivor.find("joined the replica groups", at + 1)) {
      ++joins;
    }
    CHECK_MESSAGE((joins >= 2 && joins <= 6), survivor);
    CHECK_MESSAGE(has(relaunched.output(), "fault tolerance: healed from titan_ft_"), relaunched.output());
    // Every group holds the same parameters, bit for bit.
    const std::string final0 = read_file(group_files(dir / "group0", 0) / "final.pt");
    CHECK(read_file(group_files(dir / "group1", 1) / "final.pt") == final0);
    CHECK(read_file(group_files(dir / "group2_relaunched", 2) / "final.pt") == final0);

    // A survivor trained every step once (the other may have joined after
    // step 1); which groups each step averaged.
    const auto metrics = complete_metrics({group_files(dir / "group0", 0), group_files(dir / "group1", 1)}, steps);
    std::string masks;
    for (int i = 0; i < steps; ++i) {
      REQUIRE(metrics[i]["step"] == i + 1);
      masks += (i ? "," : "") + std::to_string(static_cast<int>(metrics[i]["ft_replica_mask"].get<double>()));
    }
    MESSAGE("groups per step (bit masks): " << masks);
    // Step 4 (and maybe more) without group 2, and the relaunched group back by the end.
    CHECK(metrics[3]["ft_replica_mask"].get<double>() == 3);
    CHECK(metrics.back()["ft_replica_mask"].get<double>() == 7);

    const nlohmann::json reference =
        pytorch_replay(hf, tokens, 2, steps, groups, masks, group_files(dir / "group0", 0) / "final.pt");
    double worst_norm = 0;
    for (int i = 0; i < steps; ++i) {
      worst_norm = std::max(worst_norm, relative(metrics[i]["grad_norm"].get<double>(),
                                                 reference["steps"][i]["grad_norm"].get<double>()));
    }
    const double worst_param = worst_parameter(reference);
    MESSAGE("against PyTorch's replay: grad norm " << worst_norm << ", final parameters " << worst_param);
    CHECK(worst_norm <= 1e-4);
    CHECK(worst_param <= 1e-4);
  }

  TEST_CASE("fault tolerance: two replica groups of FSDP over 2 ranks; a rank of one killed, the other waits "
            "(min_replica_size 2) through a Lighthouse killed and restarted, the relaunched group heals rank by "
            "rank, and both end where PyTorch's replay does") {
    if (python_missing()) return;
    const int port = 28715, steps = 8, groups = 2;
    const fs::path dir = titan::test::temp_dir("fault_tolerance_fsdp");
    const fs::path tokens = dir / "tokens.u16";
    write_tokens(tokens, int64_t{steps} * groups * 2 * 2 * 33);
    const fs::path hf = initial_weights(dir, tokens);
    auto launch = [](int master_port) {
      return titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port " +
             std::to_string(master_port) + " --grace-period-s 2 -- ";
    };
    auto lighthouse = std::make_unique<Background>(lighthouse_command(port, 1), dir / "lighthouse.log");
    Background group0(group_command(0, groups, 2, port, tokens, hf, dir / "group0", steps, launch(28721),
                                    "llama3_debugmodel_fsdp.yaml"),
                      dir / "group0.log");
    {
      // Rank 1 of group 1 dies in the backward pass of step 3; its launcher ends the group.
      Background group1("env TITAN_TEST_SIGNAL=KILL:rank=1:phase=backward:step=3 " +
                            group_command(1, groups, 2, port, tokens, hf, dir / "group1", steps, launch(28723),
                                          "llama3_debugmodel_fsdp.yaml"),
                        dir / "group1.log");
      const auto exit_code = group1.wait(120);
      REQUIRE_MESSAGE((exit_code && *exit_code != 0), group1.output());
    }
    // Group 0 never trains alone; while it waits, the Lighthouse goes down and comes back.
    REQUIRE_MESSAGE(wait_until([&] {
                      const std::string output = group0.output();
                      const auto discarded = output.find("step discarded");
                      return discarded != std::string::npos &&
                             output.find("waiting for titan_ft_1", discarded) != std::string::npos;
                    }, 60),
                    group0.output());
    lighthouse.reset();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    lighthouse = std::make_unique<Background>(lighthouse_command(port, 1), dir / "lighthouse_again.log");
    Background relaunched(group_command(1, groups, 2, port, tokens, hf, dir / "group1_relaunched", steps,
                                        launch(28725), "llama3_debugmodel_fsdp.yaml"),
                          dir / "group1_relaunched.log");
    REQUIRE_MESSAGE(group0.wait(120) == 0, group0.output());
    REQUIRE_MESSAGE(relaunched.wait(120) == 0, (relaunched.output() + lighthouse->output()));
    CHECK_MESSAGE(has(group0.output(), "step discarded"), group0.output());
    CHECK_MESSAGE(has(relaunched.output(), "fault tolerance: healed from titan_ft_0"), relaunched.output());
    CHECK(read_file(group_files(dir / "group1_relaunched", 1) / "final.pt") ==
          read_file(group_files(dir / "group0", 0) / "final.pt"));
    const auto metrics = metrics_of(group_files(dir / "group0", 0));
    REQUIRE(metrics.size() == static_cast<size_t>(steps));
    for (const auto& m : metrics) CHECK(m["ft_replica_mask"].get<double>() == 3);  // never a step alone

    // Each group's 2 ranks x 2 sequences are its slot of the stream.
    const double worst_param =
        worst_parameter(pytorch_replay(hf, tokens, 4, steps, groups, "", group_files(dir / "group0", 0) / "final.pt"));
    MESSAGE("FSDP groups against PyTorch's replay: final parameters " << worst_param);
    CHECK(worst_param <= 1e-4);
  }

  TEST_CASE("fault tolerance: a replica group cut off by the network (network namespaces) is dropped from the "
            "quorum while the others train on, and once its cable is back it heals from a peer and rejoins") {
    titan::test::NetnsHosts hosts(3, "ft");
    if (!hosts.made()) {
      MESSAGE("TITAN_SKIPPED: " << hosts.reason());
      return;
    }
    const int port = 28717, steps = 14, groups = 3;
    const fs::path dir = titan::test::temp_dir("fault_tolerance_netns");
    const fs::path tokens = dir / "tokens.u16";
    write_tokens(tokens, int64_t{steps} * groups * 2 * 33);
    Background lighthouse(hosts.exec(0) + lighthouse_command(port, 2, hosts.address(0)), dir / "lighthouse.log");
    std::vector<std::unique_ptr<Background>> runs;
    for (int id = 0; id < groups; ++id) {
      runs.push_back(std::make_unique<Background>(
          hosts.exec(id) + group_command(id, groups, 2, port, tokens, {}, dir / ("group" + std::to_string(id)), steps,
                                         "", "llama3_debugmodel.yaml", hosts.address(id), hosts.address(0)),
          dir / ("group" + std::to_string(id) + ".log")));
    }
    auto steps_with = [&](double mask) {
      int count = 0;
      for (const auto& m : metrics_of(group_files(dir / "group1", 1))) count += m.value("ft_replica_mask", 0.0) == mask;
      return count;
    };
    REQUIRE_MESSAGE(wait_until([&] { return metrics_of(group_files(dir / "group2", 2)).size() >= 3; }, 60),
                    runs[2]->output());
    hosts.set_link(2, false);
    // Groups 0 and 1 time out on group 2 (fault_tolerance.timeout_seconds), discard that step and go on.
    REQUIRE_MESSAGE(wait_until([&] { return steps_with(3) >= 2; }, 60), runs[0]->output());
    // They hold still (their heartbeats lapse) until group 2, back on the
    // network, is the one group the Lighthouse hears from.
    kill(runs[0]->pid, SIGSTOP);
    kill(runs[1]->pid, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const size_t before = lighthouse.output().size();
    hosts.set_link(2, true);
    CHECK_MESSAGE(wait_until([&] { return lighthouse.output().find("[1 heartbeating]", before) != std::string::npos; },
                             30),
                  lighthouse.output());
    kill(runs[0]->pid, SIGCONT);
    kill(runs[1]->pid, SIGCONT);
    for (auto& run : runs) REQUIRE_MESSAGE(run->wait(120) == 0, run->output());
    // (Whether anyone discards a step depends on where the cut finds them:
    // inside an all-reduce, or between steps asking for the quorum.)
    CHECK_MESSAGE(has(runs[2]->output(), "fault tolerance: healed from titan_ft_"), runs[2]->output());
    const std::string final0 = read_file(group_files(dir / "group0", 0) / "final.pt");
    CHECK(read_file(group_files(dir / "group1", 1) / "final.pt") == final0);
    CHECK(read_file(group_files(dir / "group2", 2) / "final.pt") == final0);
    const auto metrics = complete_metrics({group_files(dir / "group0", 0), group_files(dir / "group1", 1)}, steps);
    CHECK(metrics.back()["ft_replica_mask"].get<double>() == 7);
  }

  TEST_CASE("fault tolerance: below min_replica_size a group waits, naming the group it misses, and trains once "
            "that group joins (started by titan launch --replica-group-id, as torchft's launcher does)") {
    if (python_missing()) return;
    const int port = 28713;
    const fs::path dir = titan::test::temp_dir("fault_tolerance_min_size");
    const fs::path tokens = dir / "tokens.u16";
    write_tokens(tokens, 3 * 2 * 2 * 33);
    const fs::path hf;  // each group's own init (the same seed), which the step-0 sync makes equal anyway
    Background lighthouse(lighthouse_command(port, 1), dir / "lighthouse.log");
    Background first(group_command(0, 2, 2, port, tokens, hf, dir / "group0", 3), dir / "group0.log");
    REQUIRE_MESSAGE(wait_until([&] { return has(first.output(), "waiting for titan_ft_1"); }, 60),
                    (first.output() + lighthouse.output()));
    CHECK(metrics_of(group_files(dir / "group0", 0)).empty());  // never a step alone
    // The second the way torchft's launcher starts groups: the ids in the
    // environment (titan launch --replica-group-id), not in the config.
    std::string train = group_command(1, 2, 2, port, tokens, hf, dir / "group1", 3);
    for (const std::string set : {" --set fault_tolerance.replica_id=1", " --set fault_tolerance.group_size=2"}) {
      REQUIRE(train.find(set) != std::string::npos);
      train.erase(train.find(set), set.size());
    }
    Background second(titan::test::titan_binary() + " launch --nproc-per-node 1 --master-port 28727"
                      " --replica-group-id 1 --num-replica-groups 2 -- " + train,
                      dir / "group1.log");
    REQUIRE_MESSAGE(first.wait(120) == 0, first.output());
    REQUIRE_MESSAGE(second.wait(120) == 0, second.output());
    CHECK(read_file(group_files(dir / "group1", 1) / "final.pt") ==
          read_file(group_files(dir / "group0", 0) / "final.pt"));
    for (const auto& m : metrics_of(group_files(dir / "group0", 0))) CHECK(m["ft_replica_mask"].get<double>() == 3);
  }

  TEST_CASE("fault tolerance: two replica groups share one dump_folder: each writes its own files in ft-replica-<id> "
            "and the quorum's first group the one series of checkpoints; a group killed and restarted by its "
            "launcher resumes from that checkpoint; the Lighthouse runs under group 0's titan launch") {
    if (python_missing()) return;
    const int port = 28731, steps = 8, groups = 2;
    const fs::path dir = titan::test::temp_dir("fault_tolerance_shared_folder");
    const fs::path tokens = dir / "tokens.u16";
    write_tokens(tokens, int64_t{steps} * groups * 2 * 33);
    const fs::path hf = initial_weights(dir, tokens);
    const fs::path job = dir / "job";
    auto launch = [](int id, int master_port, const std::string& options) {
      return titan::test::titan_binary() + " launch --nproc-per-node 1 --grace-period-s 2 --master-port " +
             std::to_string(master_port) + " --replica-group-id " + std::to_string(id) + " --num-replica-groups 2 " +
             options + " -- ";
    };
    const std::string checkpoints =
        " --set checkpoint.enable=true --set checkpoint.interval=2 --set checkpoint.keep_latest_k=0";
    // Group 0's ranks find the Lighthouse through the launcher's TORCHFT_LIGHTHOUSE.
    std::string train0 = group_command(0, groups, 2, port, tokens, hf, job, steps,
                                       launch(0, 28733, "--start-lighthouse " + std::to_string(port) +
                                                            " --lighthouse-arg=--heartbeat_timeout_ms=1500"
                                                            " --lighthouse-arg=--quorum_tick_ms=20")) +
                         checkpoints;
    const std::string lighthouse_set = " --set fault_tolerance.lighthouse=http://127.0.0.1:" + std::to_string(port);
    // Its address: its own on the route to the Lighthouse (loopback here), not fault_tolerance.address.
    for (const std::string& set : {lighthouse_set, std::string(" --set fault_tolerance.address=127.0.0.1")}) {
      REQUIRE(train0.find(set) != std::string::npos);
      train0.erase(train0.find(set), set.size());
    }
    Background group0(train0, dir / "group0.log");
    // Group 1 dies in the backward pass of step 5; its launcher starts it again.
    Background group1("env TITAN_TEST_SIGNAL=KILL:rank=0:phase=backward:step=5 " +
                          group_command(1, groups, 2, port, tokens, hf, job, steps,
                                        launch(1, 28735, "--max-restarts 1")) +
                          checkpoints,
                      dir / "group1.log");
    REQUIRE_MESSAGE(group0.wait(120) == 0, group0.output());
    REQUIRE_MESSAGE(group1.wait(120) == 0, group1.output());
    CHECK_MESSAGE(has(group0.output(), "torchft's Lighthouse listens on port"), group0.output());
    // ... and it ended with its launcher.
    CHECK(run_command("bash -c 'echo > /dev/tcp/127.0.0.1/" + std::to_string(port) + "'").exit_code != 0);
    CHECK_MESSAGE(has(group0.output(), "step discarded"), group0.output());
    CHECK_MESSAGE(has(group0.output(), ", store 127.0.0.1:"), group0.output());
    CHECK_MESSAGE(has(group0.output(), "(the Lighthouse's host 127.0.0.1 is loopback"), group0.output());
    const std::string restarted = group1.output();
    CHECK_MESSAGE(has(restarted, "restarting all 1 rank"), restarted);
    CHECK_MESSAGE(has(restarted, "resumed from checkpoint at step"), restarted);

    // One series of checkpoints, written by group 0 (the quorum's first);
    // each group's files in its own folder.
    for (int step : {2, 4, 6, 8}) {
      const fs::path saved = job / "checkpoint" / ("step-" + std::to_string(step));
      REQUIRE_MESSAGE(fs::exists(saved / "metadata.json"), saved);
      CHECK(has(read_file(saved / "config.yaml"), "replica_id: 0"));
    }
    CHECK(!has(restarted, "checkpoint saved"));  // group 1 never wrote one
    CHECK(!fs::exists(job / "metrics.jsonl"));
    for (int id : {0, 1}) CHECK(fs::exists(group_files(job, id) / "config.resolved.yaml"));
    const auto metrics = metrics_of(group_files(job, 0));
    REQUIRE(metrics.size() == static_cast<size_t>(steps));
    for (const auto& m : metrics) CHECK(m["ft_replica_mask"].get<double>() == 3);  // never a step alone
    CHECK(read_file(group_files(job, 1) / "final.pt") == read_file(group_files(job, 0) / "final.pt"));
    // Group 1's data cursor came back from group 0's checkpoint: a wrong one
    // would have averaged other tokens into steps 5 to 8.
    const double worst_param =
        worst_parameter(pytorch_replay(hf, tokens, 2, steps, groups, "", group_files(job, 0) / "final.pt"));
    MESSAGE("shared folder, restarted group, against PyTorch's replay: final parameters " << worst_param);
    CHECK(worst_param <= 1e-4);
  }

  TEST_CASE("fault tolerance: a MoE model (deepseek_v3, expert-bias load balancing) as two replica groups, one "
            "killed in a backward pass and restarted by its launcher, ends where one process does: the groups sum "
            "their routers' token counts, and the survivor's discarded step leaves its expert biases as they were") {
    if (python_missing()) return;
    const std::string bias = "layers.1.moe.router.expert_bias";
    const double off = groups_against_one_process(
        "fault_tolerance_moe",
        "configs/deepseek_v3_debugmodel_fsdp_ep.yaml --set 'plugins=[]'" + titan::test::kDeepseekSmall, 1, 4, 8,
        28737, 28739, 3, bias);
    CHECK(off == 0);  // the expert bias, bit for bit
  }

  TEST_CASE("fault tolerance: two replica groups, each a pipeline over 2 ranks (Interleaved1F1B), one rank killed "
            "and its group restarted, end where one process does") {
    if (python_missing()) return;
    groups_against_one_process("fault_tolerance_pp",
                               "configs/llama3_debugmodel_pp.yaml" + titan::test::kSmallModel +
                                   " --set model.n_layers=4",
                               2, 4, 8, 28743, 28745, 4, "layers.3.feed_forward.w2.weight");
  }

  TEST_CASE("fault tolerance: two replica groups, each deepseek_v3 over FSDP 2 x EP 2 ranks, one rank killed and its "
            "group restarted, end where one process does (experts and expert biases included)") {
    if (python_missing()) return;
    const double off = groups_against_one_process(
        "fault_tolerance_ep",
        "configs/deepseek_v3_debugmodel_fsdp_ep.yaml --set plugins.fsdp.dp_shard=2" + titan::test::kDeepseekSmall, 2, 4,
        16, 28761, 28763, 3, "layers.1.moe.router.expert_bias");
    CHECK(off <= 1e-6);
  }
}
