// `titan launch` end to end with `sh -c` scripts as ranks: the torchrun
// environment, "[rank R] " output, a failed rank stopping the others,
// restarts, forwarded signals, usage errors, and no process left behind.
#include "doctest_torch.hpp"
#include <signal.h>
#include <spawn.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "test_support.hpp"

extern char** environ;

namespace fs = std::filesystem;
using titan::test::read_file;
using titan::test::run_command;
using titan::test::titan_binary;

namespace {

using Clock = std::chrono::steady_clock;

// Ranks sleep this long unless stopped; every test must end well before.
const char* kLongSleep = "60";
constexpr auto kTestBudget = std::chrono::seconds(10);

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `titan launch ARGS -- sh -c SCRIPT`.
std::string launch(const std::string& args, const std::string& script) {
  return titan_binary() + " launch " + args + " -- sh -c " + quoted(script);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A rank's shell prelude: records its PID and that of a background sleep
// under DIR/pids (so the test can check that both are gone), then marks
// itself ready. The background sleep stands for what a trainer starts.
std::string record_pids(const fs::path& dir) {
  std::string pids = (dir / "pids").string();
  return "mkdir -p " + pids + "; echo $$ > " + pids + "/rank$RANK; sleep " + kLongSleep + " & echo $! > " + pids +
         "/sleep$RANK; touch " + (dir / "ready").string() + "$RANK; ";
}

// Shell that waits (at most 5 s) until rank 0 is ready.
std::string wait_for_rank0(const fs::path& dir) {
  return "i=0; while [ ! -f " + (dir / "ready0").string() + " ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; ";
}

// A zombie has exited too; only its parent's wait is missing.
bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t name_end = stat.rfind(')');
  return name_end == std::string::npos || name_end + 2 >= stat.size() || stat[name_end + 2] != 'Z';
}

// Every PID the ranks recorded is gone (a SIGKILL gets a moment to land);
// any survivor fails the test and is then killed.
void check_no_process_left(const fs::path& dir, size_t expected_pids) {
  std::vector<std::pair<std::string, pid_t>> pids;
  if (fs::exists(dir / "pids")) {
    for (const auto& entry : fs::directory_iterator(dir / "pids")) {
      std::string text = read_file(entry.path());
      if (!text.empty()) pids.emplace_back(entry.path().filename().string(), std::stoi(text));
    }
  }
  CHECK_MESSAGE(pids.size() == expected_pids, "the ranks recorded ", pids.size(), " PIDs");
  auto deadline = Clock::now() + std::chrono::seconds(2);
  auto any_alive = [&] {
    for (const auto& [name, pid] : pids) {
      if (process_alive(pid)) return true;
    }
    return false;
  };
  while (any_alive() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (const auto& [name, pid] : pids) {
    CHECK_MESSAGE(!process_alive(pid), name, " (pid ", pid, ") is still running after titan launch exited");
    if (process_alive(pid)) kill(pid, SIGKILL);
  }
}

struct Timed {
  titan::test::CommandResult result;
  std::chrono::duration<double> elapsed;
};

Timed run_timed(const std::string& command) {
  auto start = Clock::now();
  auto result = run_command(command);
  return {result, Clock::now() - start};
}

// The launcher as a background process, its output in a file.
struct BackgroundLaunch {
  pid_t pid = 0;
  fs::path log;

  BackgroundLaunch(const std::string& command, const fs::path& log_path) : log(log_path) {
    std::string line = "exec " + command + " > " + log.string() + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
    REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  }

  // The exit code, or nullopt (and the launcher killed) after `seconds`.
  std::optional<int> wait(double seconds) {
    auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (Clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return std::nullopt;
  }
};

bool wait_for_files(const std::vector<fs::path>& files, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  for (const auto& file : files) {
    while (!fs::exists(file)) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return true;
}

}  // namespace

TEST_SUITE("launch") {
  TEST_CASE("launch: each rank gets the torchrun environment and its output a rank prefix") {
    // An outer torchrun's agent-store flag must not reach the ranks: rank 0
    // hosts the store itself. Node 1's launcher needs node 0's (they meet
    // in its rendezvous store on --master-port + 1), so both run here.
    auto node = [](int rank) {
      return "TORCHELASTIC_USE_AGENT_STORE=True timeout 120 " +
             launch("--nproc-per-node 2 --nnodes 2 --node-rank " + std::to_string(rank) +
                        " --master-addr 127.0.0.1 --master-port 29555 --max-restarts 3 --rdzv-timeout-s 60",
                    "echo \"RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
                    "GROUP_RANK=$GROUP_RANK MASTER=$MASTER_ADDR:$MASTER_PORT "
                    "RESTARTS=$TITAN_RESTART_COUNT/$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS "
                    "AGENT_STORE=${TORCHELASTIC_USE_AGENT_STORE-unset}\"");
    };
    auto result = run_command(node(0) + " & " + node(1) + "; code=$?; wait $! && exit $code");
    CHECK_MESSAGE(result.exit_code == 0, result.output);
    for (int local_rank : {0, 1}) {
      std::string rank = std::to_string(2 + local_rank);
      std::string expected = "[rank " + rank + "] RANK=" + rank + " WORLD_SIZE=4 LOCAL_RANK=" +
                             std::to_string(local_rank) +
                             " LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER=127.0.0.1:29555 RESTARTS=0/0/3 "
                             "AGENT_STORE=unset\n";
      CHECK_MESSAGE(contains(result.output, expected), expected, "not in:\n", result.output);
    }
  }

  TEST_CASE("launch: the default port is MASTER_PORT from the environment or else 29500") {
    auto result = run_command("MASTER_PORT=29777 " + launch("--nproc-per-node 1", "echo port=$MASTER_PORT"));
    CHECK_MESSAGE(contains(result.output, "[rank 0] port=29777\n"), result.output);
    result = run_command("MASTER_PORT=29777 " +
                         launch("--nproc-per-node 1 --master-port 29600", "echo port=$MASTER_PORT"));
    CHECK_MESSAGE(contains(result.output, "[rank 0] port=29600\n"), result.output);
    result = run_command("env -u MASTER_PORT " + launch("--nproc-per-node 1", "echo port=$MASTER_PORT"));
    CHECK_MESSAGE(contains(result.output, "[rank 0] port=29500\n"), result.output);
  }

  TEST_CASE("launch: ranks on one machine share its cores through OMP_NUM_THREADS (cores / ranks, at least 1), "
            "unless it is set") {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::string echo = "echo omp=${OMP_NUM_THREADS-unset}";
    auto result = run_command("env -u OMP_NUM_THREADS " + launch("--nproc-per-node 4 --master-port 29603", echo));
    for (int rank = 0; rank < 4; ++rank) {
      std::string expected = "[rank " + std::to_string(rank) + "] omp=" + std::to_string(std::max(1, cores / 4)) + "\n";
      CHECK_MESSAGE(contains(result.output, expected), expected, "not in:\n", result.output);
    }
    result = run_command("OMP_NUM_THREADS=3 " + launch("--nproc-per-node 2 --master-port 29603", echo));
    CHECK_MESSAGE(contains(result.output, "[rank 1] omp=3\n"), result.output);
    result = run_command("env -u OMP_NUM_THREADS " + launch("--nproc-per-node 1 --master-port 29603", echo));
    CHECK_MESSAGE(contains(result.output, "[rank 0] omp=unset\n"), result.output);
  }

  TEST_CASE("launch: output comes in whole lines with stdout and stderr apart and a last partial line flushed") {
    fs::path dir = titan::test::temp_dir("launch_output");
    fs::path err = dir / "stderr.txt";
    // Many lines from several ranks at once: any line split or mixed with
    // another rank's shows up as a malformed line.
    auto result = run_command(
        "(" +
        launch("--nproc-per-node 3",
               "i=0; while [ $i -lt 500 ]; do echo \"line-$RANK-$i 0123456789abcdefghijklmnopqrstuvwxyz\"; "
               "i=$((i+1)); done; echo \"to-stderr-$RANK\" >&2; printf \"partial-$RANK\"") +
        " 2> " + err.string() + ")");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output, read_file(err));
    std::istringstream lines(result.output);
    std::string line;
    int counts[3] = {0, 0, 0};
    int partials = 0;
    while (std::getline(lines, line)) {
      bool well_formed = line.size() > 9 && line.rfind("[rank ", 0) == 0 && line[6] >= '0' && line[6] <= '2' &&
                         line.substr(7, 2) == "] ";
      REQUIRE_MESSAGE(well_formed, "malformed line '", line, "'");
      std::string rank(1, line[6]);
      std::string text = line.substr(9);
      if (text == "partial-" + rank) {
        ++partials;
      } else {
        CHECK_MESSAGE(text.rfind("line-" + rank + "-", 0) == 0, "rank ", rank, " printed '", text, "'");
        CHECK(text.size() > 36);
        CHECK(text.substr(text.size() - 36) == "0123456789abcdefghijklmnopqrstuvwxyz");
        ++counts[line[6] - '0'];
      }
    }
    CHECK(counts[0] == 500);
    CHECK(counts[1] == 500);
    CHECK(counts[2] == 500);
    CHECK(partials == 3);
    std::string errors = read_file(err);
    for (const char* expected : {"[rank 0] to-stderr-0\n", "[rank 1] to-stderr-1\n", "[rank 2] to-stderr-2\n"}) {
      CHECK_MESSAGE(contains(errors, expected), errors);
    }
    CHECK(!contains(result.output, "to-stderr"));
  }

  TEST_CASE("launch: a rank exiting with status 3 stops the others at once and the launcher fails naming it") {
    fs::path dir = titan::test::temp_dir("launch_exit3");
    auto run = run_timed(launch("--nproc-per-node 2", record_pids(dir) + "if [ \"$RANK\" = 1 ]; then " +
                                                          wait_for_rank0(dir) + "exit 3; fi; wait"));
    const auto& output = run.result.output;
    CHECK_MESSAGE(run.result.exit_code == 1, output);
    CHECK_MESSAGE(contains(output, "titan launch: rank 1 (pid "), output);
    CHECK_MESSAGE(contains(output, ") exited with status 3\n"), output);
    CHECK_MESSAGE(contains(output, "titan launch: failed: rank 1 (pid "), output);
    CHECK_MESSAGE(run.elapsed < kTestBudget, "took ", run.elapsed.count(), " s; ", output);
    check_no_process_left(dir, 4);
  }

  TEST_CASE("launch: a rank killed by SIGKILL is reported with its rank and the signal") {
    fs::path dir = titan::test::temp_dir("launch_sigkill");
    auto run = run_timed(launch("--nproc-per-node 2", record_pids(dir) + "if [ \"$RANK\" = 1 ]; then " +
                                                          wait_for_rank0(dir) + "kill -9 $$; fi; wait"));
    const auto& output = run.result.output;
    CHECK_MESSAGE(run.result.exit_code == 1, output);
    CHECK_MESSAGE(contains(output, ") was killed by signal 9 (SIGKILL)"), output);
    CHECK_MESSAGE(contains(output, "titan launch: rank 1 (pid "), output);
    CHECK_MESSAGE(run.elapsed < kTestBudget, "took ", run.elapsed.count(), " s; ", output);
    check_no_process_left(dir, 4);
  }

  TEST_CASE("launch: a rank that ignores SIGTERM is killed after the grace period") {
    fs::path dir = titan::test::temp_dir("launch_grace");
    // trap "" TERM: the rank and its background sleep ignore SIGTERM.
    auto run = run_timed(launch("--nproc-per-node 2 --grace-period-s 1",
                                "trap '' TERM; " + record_pids(dir) + "if [ \"$RANK\" = 1 ]; then " +
                                    wait_for_rank0(dir) + "exit 3; fi; wait"));
    const auto& output = run.result.output;
    CHECK_MESSAGE(run.result.exit_code == 1, output);
    CHECK_MESSAGE(contains(output, "titan launch: rank 0 (pid "), output);
    CHECK_MESSAGE(contains(output, "still running 1 s after being told to stop; sending SIGKILL"), output);
    CHECK_MESSAGE(contains(output, "titan launch: failed: rank 1 (pid "), output);
    CHECK_MESSAGE(run.elapsed < kTestBudget, "took ", run.elapsed.count(), " s; ", output);
    check_no_process_left(dir, 4);
  }

  TEST_CASE("launch: with --max-restarts 1 a rank failing on attempt 0 only is restarted and the job succeeds") {
    auto result = run_command(launch("--nproc-per-node 2 --max-restarts 1",
                                     "echo \"attempt $TITAN_RESTART_COUNT/$TORCHELASTIC_RESTART_COUNT\"; "
                                     "if [ \"$RANK\" = 1 ] && [ \"$TITAN_RESTART_COUNT\" = 0 ]; then exit 5; fi"));
    const auto& output = result.output;
    CHECK_MESSAGE(result.exit_code == 0, output);
    CHECK_MESSAGE(contains(output, ") exited with status 5\n"), output);
    size_t restart = output.find("titan launch: restarting all 2 ranks (attempt 1 of 1)\n");
    REQUIRE_MESSAGE(restart != std::string::npos, output);
    CHECK(output.find("[rank 1] attempt 0/0\n") < restart);
    for (const char* line : {"[rank 0] attempt 1/1\n", "[rank 1] attempt 1/1\n"}) {
      CHECK_MESSAGE(output.find(line) > restart, output);
      CHECK_MESSAGE(contains(output, line), output);
    }
    CHECK(!contains(output, "failed:"));
  }

  TEST_CASE("launch: with --max-restarts 1 a rank failing every time ends the job after two attempts") {
    auto result = run_command(launch("--nproc-per-node 2 --max-restarts 1",
                                     "if [ \"$RANK\" = 1 ]; then exit 4; fi; sleep " + std::string(kLongSleep)));
    const auto& output = result.output;
    CHECK_MESSAGE(result.exit_code == 1, output);
    CHECK(contains(output, "restarting all 2 ranks (attempt 1 of 1)"));
    size_t first = output.find(") exited with status 4\n");
    REQUIRE(first != std::string::npos);
    CHECK_MESSAGE(output.find(") exited with status 4\n", first + 1) != std::string::npos, output);
    CHECK_MESSAGE(contains(output, "exited with status 4; no restarts left (--max-restarts 1)"), output);
  }

  TEST_CASE("launch: SIGTERM to the launcher is forwarded to every rank") {
    fs::path dir = titan::test::temp_dir("launch_sigterm");
    // Ranks that stop cleanly: the launcher then exits 0.
    BackgroundLaunch clean(launch("--nproc-per-node 2", "trap 'echo \"rank $RANK got TERM\"; exit 0' TERM; " +
                                                            record_pids(dir) + "wait"),
                           dir / "clean.log");
    REQUIRE(wait_for_files({dir / "ready0", dir / "ready1"}, 8));
    REQUIRE(kill(clean.pid, SIGTERM) == 0);
    auto exit_code = clean.wait(8);
    std::string log = read_file(clean.log);
    REQUIRE_MESSAGE(exit_code.has_value(), "titan launch did not stop; ", log);
    CHECK_MESSAGE(*exit_code == 0, log);
    CHECK_MESSAGE(contains(log, "titan launch: received SIGTERM; forwarding it to 2 running ranks"), log);
    CHECK_MESSAGE(contains(log, "[rank 0] rank 0 got TERM\n"), log);
    CHECK_MESSAGE(contains(log, "[rank 1] rank 1 got TERM\n"), log);
    check_no_process_left(dir, 4);

    // Ranks that die from the signal: 128 + 15.
    fs::path dir2 = titan::test::temp_dir("launch_sigterm_default");
    BackgroundLaunch dying(launch("--nproc-per-node 2", record_pids(dir2) + "wait"), dir2 / "dying.log");
    REQUIRE(wait_for_files({dir2 / "ready0", dir2 / "ready1"}, 8));
    REQUIRE(kill(dying.pid, SIGTERM) == 0);
    exit_code = dying.wait(8);
    log = read_file(dying.log);
    REQUIRE_MESSAGE(exit_code.has_value(), "titan launch did not stop; ", log);
    CHECK_MESSAGE(*exit_code == 128 + SIGTERM, log);
    check_no_process_left(dir2, 4);
  }

  TEST_CASE("launch: usage errors exit 2 with the message and the usage") {
    auto expect_usage_error = [](const std::string& args, const std::string& message) {
      auto result = run_command(titan_binary() + " launch " + args);
      CHECK_MESSAGE(result.exit_code == 2, args, ": ", result.output);
      CHECK_MESSAGE(contains(result.output, message), args, ": ", result.output);
      CHECK_MESSAGE(contains(result.output, "usage: titan launch"), args, ": ", result.output);
    };
    expect_usage_error("", "--nproc-per-node is required");
    expect_usage_error("--nproc-per-node 0 -- true", "--nproc-per-node: expected an integer in 1..4096, got '0'");
    expect_usage_error("--nproc-per-node 2", "a PROGRAM to launch is required");
    expect_usage_error("--nproc-per-node 2 --bogus 1 -- true", "unknown option '--bogus'");
    expect_usage_error("--nproc-per-node 2 --nnodes 2 --node-rank 2 -- true", "--node-rank 2 must be below --nnodes 2");
    expect_usage_error("--nproc-per-node 2 --max-restarts", "--max-restarts needs a value");
    expect_usage_error("--nproc-per-node 1 --nnodes 2 --master-port 29600 --rdzv-port 29600 -- true",
                       "--rdzv-port must differ from --master-port");
    expect_usage_error("--nproc-per-node 1 --rdzv-timeout-s 0 -- true", "--rdzv-timeout-s: expected a number of seconds > 0");
    expect_usage_error("--nproc-per-node 1 --lighthouse-min-replicas 2 -- true",
                       "--lighthouse-min-replicas configures the Lighthouse that --start-lighthouse P starts");
    expect_usage_error("--nproc-per-node 1 --master-port 28741 --start-lighthouse 28741 -- true",
                       "--start-lighthouse 28741: the port is the job's store's");
  }

  TEST_CASE("launch: --help shows the torchrun equivalent and exits 0 but after PROGRAM it goes to the program") {
    auto help = run_command(titan_binary() + " launch --help");
    CHECK(help.exit_code == 0);
    CHECK_MESSAGE(contains(help.output, "torchrun --nproc_per_node N --no_python PROGRAM"), help.output);
    auto passed = run_command(titan_binary() + " launch --nproc_per_node=1 sh -c 'echo \"$1\"' sh --help");
    CHECK(passed.exit_code == 0);
    CHECK_MESSAGE(contains(passed.output, "[rank 0] --help\n"), passed.output);
    CHECK(contains(run_command(titan_binary() + " --help").output, "launch --nproc-per-node N"));
  }

  TEST_CASE("launch: a program that cannot be found is named in the error") {
    auto result = run_command(titan_binary() + " launch --nproc-per-node 2 -- titan-no-such-program --flag");
    CHECK(result.exit_code != 0);
    CHECK_MESSAGE(contains(result.output, "cannot start 'titan-no-such-program'"), result.output);
    CHECK_MESSAGE(contains(result.output, "not found in PATH"), result.output);
  }
}
