// fork/exec of the workers with stdout and stderr sent to a log file; the
// rendezvous port is one the kernel just handed out, so parallel harness
// runs (ctest -j) do not collide.
#include "rank_group.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "titan/cpu_threads.hpp"
#include "titan/error.hpp"

extern char** environ;

namespace titan::conformance {

namespace {

// A port below Linux's ephemeral range (32768+): ports the kernel hands out
// for outgoing connections — Gloo opens many — cannot then take it between
// this check and rank 0's bind. Below 29000 too, clear of torchrun's 29500
// and the fixed ports of the multi-process tests. Another listener still
// can take it; the caller retries the group on "Address already in use".
int free_port() {
  static std::mt19937 random(static_cast<unsigned>(std::random_device{}()) ^ static_cast<unsigned>(getpid()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    int port = std::uniform_int_distribution<int>(20000, 28999)(random);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw Error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(port));
    bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    if (free) return port;
  }
  throw Error("cannot find a free port in 20000..28999 for the workers' rendezvous");
}

std::string log_tail(const std::string& path, size_t max_chars = 1500) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  return all.size() > max_chars ? "..." + all.substr(all.size() - max_chars) : all;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended abnormally";
}

pid_t start_rank(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                 const std::string& log_path) {
  // Built before fork: only async-signal-safe calls between fork and exec.
  std::vector<std::string> env_storage;
  for (char** e = environ; *e; ++e) env_storage.emplace_back(*e);
  env_storage.insert(env_storage.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, args;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_storage = argv;
  for (auto& a : argv_storage) args.push_back(a.data());
  args.push_back(nullptr);
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw Error("cannot create worker log '" + log_path + "': " + std::strerror(errno));
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(log);
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  setpgid(pid, pid);
  return pid;
}

}  // namespace

std::string self_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

namespace {

RankGroupOutcome run_once(const std::vector<std::string>& argv, int world_size, const std::string& log_dir,
                          std::chrono::seconds deadline) {
  std::filesystem::create_directories(log_dir);
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> env = {"RANK=" + std::to_string(rank),        "LOCAL_RANK=" + std::to_string(rank),
                                    "WORLD_SIZE=" + std::to_string(world_size),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(world_size),
                                    "MASTER_ADDR=127.0.0.1",               "MASTER_PORT=" + port};
    // The workers share this machine's cores, as titan launch's ranks do.
    if (!std::getenv("OMP_NUM_THREADS")) env.push_back("OMP_NUM_THREADS=" + std::to_string(threads_per_rank(world_size)));
    pids.push_back(start_rank(argv, env, log_dir + "/rank-" + std::to_string(rank) + ".log"));
  }
  RankGroupOutcome outcome;
  outcome.ok = true;
  auto kill_all = [&] {
    for (pid_t pid : pids) {
      if (pid > 0) kill(-pid, SIGKILL);
    }
  };
  const auto until = std::chrono::steady_clock::now() + deadline;
  int running = world_size;
  while (running > 0) {
    bool reaped = false;
    for (int rank = 0; rank < world_size; ++rank) {
      if (pids[rank] <= 0) continue;
      int status = 0;
      pid_t done = waitpid(pids[rank], &status, WNOHANG);
      if (done != pids[rank]) continue;
      pids[rank] = 0;
      --running;
      reaped = true;
      bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!clean && outcome.ok) {
        outcome.ok = false;
        outcome.failure = "rank " + std::to_string(rank) + " " + describe_status(status) + "; its log (" + log_dir +
                          "/rank-" + std::to_string(rank) + ".log) ends:\n" +
                          log_tail(log_dir + "/rank-" + std::to_string(rank) + ".log");
        kill_all();
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > until) {
      kill_all();
      if (outcome.ok) {
        outcome.ok = false;
        outcome.failure = "the " + std::to_string(world_size) + "-rank worker group did not finish within " +
                          std::to_string(deadline.count()) + " s (a hang?); rank 0's log ends:\n" +
                          log_tail(log_dir + "/rank-0.log");
      }
    }
    if (!reaped && running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return outcome;
}

}  // namespace

RankGroupOutcome run_rank_group(const std::vector<std::string>& argv, int world_size, const std::string& log_dir,
                                std::chrono::seconds deadline) {
  for (int attempt = 1;; ++attempt) {
    RankGroupOutcome outcome = run_once(argv, world_size, log_dir, deadline);
    bool port_taken = !outcome.ok && outcome.failure.find("Address already in use") != std::string::npos;
    if (!port_taken || attempt == 3) return outcome;
  }
}

}  // namespace titan::conformance
