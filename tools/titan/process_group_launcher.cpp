// The supervisor behind `titan launch`: fork/exec of the ranks, each in its
// own process group so that one kill reaches everything a rank started, a
// self-pipe that turns signals into poll() events, and whole-line relaying
// of the ranks' output. Across nodes (--nnodes > 1) the launchers agree on
// failures and restart rounds through NodeRendezvous.
#include "process_group_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "node_rendezvous.h"
#include "titan/cpu_threads.hpp"

extern char** environ;

namespace titan::cli {

namespace {

using Clock = std::chrono::steady_clock;

// A rank that writes without newlines is relayed in pieces of this size, so
// the launcher's buffers stay bounded.
constexpr size_t kMaxLineBytes = 64 * 1024;
// After the last rank has exited, how long to wait for output still held in
// pipes by processes that left the rank's process group (setsid).
constexpr auto kDrainTimeout = std::chrono::seconds(1);

// Written by the signal handler, read by the poll loop.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int signal_number) {
  int saved_errno = errno;
  unsigned char byte = static_cast<unsigned char>(signal_number);
  ssize_t written = write(g_signal_pipe[1], &byte, 1);
  (void)written;  // a full pipe already holds a wake-up
  errno = saved_errno;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the reader went away: the ranks keep running, their output is lost
    done += static_cast<size_t>(n);
  }
}

void say(const std::string& message) { write_all(STDERR_FILENO, "titan launch: " + message + "\n"); }

std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return "signal " + std::to_string(signal_number);
  }
}

std::string format_seconds(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", value);
  return text;
}

// Whether a process is stopped (SIGSTOP, SIGTSTP, a debugger): it holds its
// peers in their collectives until they time out, and it is the rank to
// name, not the peer whose timeout ended the job.
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');  // the command name may hold spaces
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'T' || text[close + 2] == 't');
}

std::string plural(size_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

// One of a rank's output pipes, relayed to the launcher's stdout or stderr
// whole lines at a time, each line behind "[rank R] ".
struct OutputRelay {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string prefix;
  std::string pending;

  // One read per call, so that a rank that writes without pause cannot
  // starve the others.
  void read_some() {
    char buffer[16384];
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      finish();
      return;
    }
    pending.append(buffer, static_cast<size_t>(n));
    std::string lines;
    size_t start = 0;
    for (size_t newline; (newline = pending.find('\n', start)) != std::string::npos; start = newline + 1) {
      lines += prefix;
      lines.append(pending, start, newline + 1 - start);
    }
    pending.erase(0, start);
    if (pending.size() >= kMaxLineBytes) {
      lines += prefix + pending + "\n";
      pending.clear();
    }
    write_all(target, lines);
  }

  // Passes on a last line that has no newline, and closes the pipe.
  void finish() {
    if (!pending.empty()) write_all(target, prefix + pending + "\n");
    pending.clear();
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

struct Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;  // also the id of its process group
  bool running = false;
  int status = 0;  // from waitpid, once reaped
  OutputRelay out, err;

  bool succeeded() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

  std::string outcome() const {
    std::string who = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
    if (WIFSIGNALED(status)) {
      return who + " was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
             signal_name(WTERMSIG(status)) + ")";
    }
    return who + " exited with status " + std::to_string(WEXITSTATUS(status));
  }
};

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& options);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run();

 private:
  bool start_ranks(int attempt);
  bool start_rank(Rank& rank, int attempt);
  std::vector<std::string> rank_environment(const Rank& rank, int attempt) const;
  void supervise();
  void handle_signals();
  void reap_exited();
  void stop_running_ranks(int signal_number);
  void start_grace_period();
  void watch_other_nodes();
  void stop_for(const std::string& reason);
  size_t running_count() const;

  const LaunchOptions& options_;
  std::vector<Rank> ranks_;
  int devnull_ = -1;
  int forwarded_signal_ = 0;  // the first SIGINT/SIGTERM the launcher received
  bool stopping_ = false;     // this attempt is being torn down; exits are no longer failures
  std::optional<size_t> failed_rank_;
  // Across nodes: the rendezvous (null on one node), the round being run,
  // a failure another node reported, or the store lost.
  std::unique_ptr<NodeRendezvous> rendezvous_;
  int round_ = 0;
  std::optional<std::string> remote_failure_;
  std::optional<std::string> rendezvous_lost_;
  bool remote_ended_ = false;  // another node ended the job: no restart
  std::optional<Clock::time_point> next_watch_;
  std::optional<Clock::time_point> kill_deadline_;
  struct sigaction previous_int_ {}, previous_term_{}, previous_chld_{}, previous_pipe_{};
};

Launcher::Launcher(const LaunchOptions& options) : options_(options) {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  devnull_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGCHLD, &action, &previous_chld_);
  // A closed stdout must not kill the launcher while ranks still run.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &previous_pipe_);
}

Launcher::~Launcher() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGCHLD, &previous_chld_, nullptr);
  sigaction(SIGPIPE, &previous_pipe_, nullptr);
  for (int& fd : g_signal_pipe) {
    close(fd);
    fd = -1;
  }
  if (devnull_ >= 0) close(devnull_);
}

int Launcher::run() {
  if (options_.nnodes > 1) {
    try {
      rendezvous_ = std::make_unique<NodeRendezvous>(options_);
      say("node " + std::to_string(options_.node_rank) + " (" + rendezvous_->address() +
          ") joined the launchers' rendezvous at " + options_.master_addr + ":" + std::to_string(options_.rdzv_port) +
          "; waiting up to " + format_seconds(options_.rdzv_timeout_s) + " for all " +
          std::to_string(options_.nnodes) + " nodes");
      rendezvous_->join(0);
    } catch (const RendezvousError& error) {
      say(error.what());
      return kLaunchRankFailed;
    }
  }
  auto end_job = [&](const std::string& why) {
    if (!rendezvous_) return;
    rendezvous_->end_job(why);
    rendezvous_->leave(round_);
  };
  for (int attempt = 0;; ++attempt) {
    round_ = attempt;
    stopping_ = false;
    failed_rank_.reset();
    remote_failure_.reset();
    kill_deadline_.reset();
    next_watch_.reset();
    bool started = start_ranks(attempt);
    supervise();
    if (forwarded_signal_) {
      end_job("its launcher received " + signal_name(forwarded_signal_));
      bool all_succeeded = std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.succeeded(); });
      return all_succeeded && started ? 0 : 128 + forwarded_signal_;
    }
    if (rendezvous_lost_) {
      say("failed: " + *rendezvous_lost_);
      return kLaunchRankFailed;
    }
    if (!started) {
      end_job("it cannot start '" + options_.program[0] + "'");
      return kLaunchCannotExec;
    }
    if (!failed_rank_ && !remote_failure_) {
      if (!rendezvous_) return 0;
      try {
        if (auto failed = rendezvous_->finish(attempt)) {
          say("failed: this node's ranks finished, but round " + std::to_string(attempt) + " failed on " + *failed);
          return kLaunchRankFailed;
        }
      } catch (const RendezvousError& error) {
        say("failed: " + std::string(error.what()));
        return kLaunchRankFailed;
      }
      return 0;
    }
    std::string what = failed_rank_ ? ranks_[*failed_rank_].outcome() : *remote_failure_;
    if (attempt < options_.max_restarts && !remote_ended_) {
      handle_signals();  // a signal that came during the teardown ends the job instead
      if (forwarded_signal_) {
        end_job("its launcher received " + signal_name(forwarded_signal_));
        return 128 + forwarded_signal_;
      }
      if (rendezvous_) {
        say("joining round " + std::to_string(attempt + 1) + " with the other " +
            plural(static_cast<size_t>(options_.nnodes - 1), "node") + " (waiting up to " +
            format_seconds(options_.rdzv_timeout_s) + ")");
        try {
          rendezvous_->join(attempt + 1);
        } catch (const RendezvousError& error) {
          say("failed: " + std::string(error.what()));
          return kLaunchRankFailed;
        }
      }
      say("restarting all " + plural(ranks_.size(), "rank") + (rendezvous_ ? " of this node" : "") + " (attempt " +
          std::to_string(attempt + 1) + " of " + std::to_string(options_.max_restarts) + ")");
      continue;
    }
    std::string restarts =
        options_.max_restarts > 0 && !remote_ended_
            ? "; no restarts left (--max-restarts " + std::to_string(options_.max_restarts) + ")"
            : "";
    say("failed: " + what + restarts);
    if (rendezvous_) rendezvous_->leave(attempt);
    return kLaunchRankFailed;
  }
}

bool Launcher::start_ranks(int attempt) {
  ranks_.clear();
  ranks_.resize(static_cast<size_t>(options_.nproc_per_node));
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& rank = ranks_[i];
    rank.local_rank = static_cast<int>(i);
    rank.rank = options_.node_rank * options_.nproc_per_node + rank.local_rank;
    if (!start_rank(rank, attempt)) {
      stopping_ = true;
      stop_running_ranks(SIGTERM);
      start_grace_period();
      return false;
    }
  }
  return true;
}

std::vector<std::string> Launcher::rank_environment(const Rank& rank, int attempt) const {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank.rank)},
      {"WORLD_SIZE", std::to_string(options_.nproc_per_node * options_.nnodes)},
      {"LOCAL_RANK", std::to_string(rank.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options_.nproc_per_node)},
      {"GROUP_RANK", std::to_string(options_.node_rank)},
      {"MASTER_ADDR", options_.master_addr},
      {"MASTER_PORT", std::to_string(options_.master_port)},
      {"TITAN_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options_.max_restarts)},
  };
  if (options_.replica_group_id >= 0) {
    ours.emplace_back("REPLICA_GROUP_ID", std::to_string(options_.replica_group_id));
    ours.emplace_back("NUM_REPLICA_GROUPS", std::to_string(options_.num_replica_groups));
  }
  // Each rank's LibTorch would start a thread per core: N ranks on one
  // machine would run N times as many threads as cores.
  if (options_.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) {
    ours.emplace_back("OMP_NUM_THREADS", std::to_string(threads_per_rank(options_.nproc_per_node)));
  }
  // Rank 0 hosts the TCPStore itself; an outer torchrun's setting must not
  // leak in and make every rank wait for an agent's store.
  std::vector<std::string> dropped = {"TORCHELASTIC_USE_AGENT_STORE"};
  for (const auto& [name, value] : ours) dropped.push_back(name);
  std::vector<std::string> environment;
  for (char** entry = environ; *entry; ++entry) {
    std::string text = *entry;
    std::string name = text.substr(0, text.find('='));
    if (std::find(dropped.begin(), dropped.end(), name) == dropped.end()) environment.push_back(text);
  }
  for (const auto& [name, value] : ours) environment.push_back(name + "=" + value);
  return environment;
}

bool Launcher::start_rank(Rank& rank, int attempt) {
  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are made.
  std::vector<std::string> environment = rank_environment(rank, attempt);
  std::vector<char*> envp;
  for (auto& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> arguments = options_.program;
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 || pipe2(exec_pipe, O_CLOEXEC) != 0) {
    say(std::string("cannot create pipes for rank ") + std::to_string(rank.rank) + ": " + std::strerror(errno));
    return false;
  }
  // Signals stay blocked until the child has dropped the launcher's handlers.
  sigset_t blocked, previous_mask;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked, &previous_mask);
  pid_t launcher_pid = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // A launcher that dies (SIGKILL, a lost machine) takes its ranks with
    // it: left running, they would hold their peers until a timeout.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher_pid) _exit(kLaunchRankFailed);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    for (int signal_number : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) sigaction(signal_number, &default_action, nullptr);
    sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
    // Ranks run outside the terminal's foreground group; reading the
    // terminal would stop them, so stdin is /dev/null.
    if (devnull_ >= 0) dup2(devnull_, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    int exec_errno = errno;
    ssize_t written = write(exec_pipe[1], &exec_errno, sizeof exec_errno);
    (void)written;
    _exit(kLaunchCannotExec);
  }
  int fork_errno = errno;
  if (pid > 0) setpgid(pid, pid);  // also here, so that a kill right after fork reaches the group
  sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(exec_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(exec_pipe[0]);
    say("cannot start rank " + std::to_string(rank.rank) + ": fork: " + std::strerror(fork_errno));
    return false;
  }
  rank.pid = pid;
  rank.running = true;
  std::string prefix = "[rank " + std::to_string(rank.rank) + "] ";
  rank.out = OutputRelay{out_pipe[0], STDOUT_FILENO, prefix, ""};
  rank.err = OutputRelay{err_pipe[0], STDERR_FILENO, prefix, ""};
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);

  // The exec pipe closes on a successful exec, or carries exec's errno.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    std::string hint = exec_errno == ENOENT && options_.program[0].find('/') == std::string::npos
                           ? " (not found in PATH)"
                           : "";
    say("cannot start '" + options_.program[0] + "' for rank " + std::to_string(rank.rank) + ": " +
        std::strerror(exec_errno) + hint);
    return false;
  }
  return true;
}

size_t Launcher::running_count() const {
  return static_cast<size_t>(std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

void Launcher::stop_running_ranks(int signal_number) {
  // A rank that is running has not been reaped, so its process group id is
  // still its own (a zombie leader keeps it) and cannot name another group.
  for (Rank& rank : ranks_) {
    if (rank.running) kill(-rank.pid, signal_number);
  }
}

// The ranks told to stop get this long before SIGKILL; a second reason to
// stop does not extend it.
void Launcher::start_grace_period() {
  if (kill_deadline_) return;
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.grace_period_s));
}

void Launcher::handle_signals() {
  unsigned char received[64];
  ssize_t n;
  while ((n = read(g_signal_pipe[0], received, sizeof received)) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int signal_number = received[i];
      if (signal_number != SIGINT && signal_number != SIGTERM) continue;  // SIGCHLD only wakes the loop
      if (forwarded_signal_) {
        say("received " + signal_name(signal_number) + " again; killing all ranks");
        stop_running_ranks(SIGKILL);
        kill_deadline_.reset();
        continue;
      }
      forwarded_signal_ = signal_number;
      stopping_ = true;
      say("received " + signal_name(signal_number) + "; forwarding it to " + plural(running_count(), "running rank"));
      stop_running_ranks(signal_number);
      start_grace_period();
    }
  }
}

void Launcher::reap_exited() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& rank = ranks_[i];
    if (!rank.running) continue;
    siginfo_t info{};
    // WNOWAIT leaves the rank a zombie, which keeps its process group id
    // reserved while whatever it left behind in the group is killed.
    if (waitid(P_PID, static_cast<id_t>(rank.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) {
      continue;
    }
    kill(-rank.pid, SIGKILL);
    int status = 0;
    while (waitpid(rank.pid, &status, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
    rank.status = status;
    if (stopping_ || rank.succeeded()) continue;
    stopping_ = true;
    failed_rank_ = i;
    say(rank.outcome());
    if (rendezvous_) {
      try {
        rendezvous_->report_failure(round_, rank.outcome());
        say("told the other nodes that round " + std::to_string(round_) + " failed");
      } catch (const RendezvousError& error) {
        rendezvous_lost_ = error.what();
      }
    }
    for (const Rank& other : ranks_) {
      if (other.running && is_stopped(other.pid)) {
        say("rank " + std::to_string(other.rank) + " (pid " + std::to_string(other.pid) +
            ") is stopped (SIGSTOP or a debugger) and was not running: the peers' timeouts point to it");
      }
    }
    size_t others = running_count();
    if (others > 0) {
      say("stopping " + plural(others, "other rank") + " (SIGTERM, then SIGKILL after " +
          format_seconds(options_.grace_period_s) + ")");
    }
    stop_running_ranks(SIGTERM);
    start_grace_period();
  }
}

// Across nodes: a failure another node reported, the job ended elsewhere,
// or node 0's store gone stops this node's ranks too. One look at the store
// per monitor interval.
void Launcher::watch_other_nodes() {
  if (!rendezvous_ || stopping_) return;
  auto now = Clock::now();
  if (next_watch_ && now < *next_watch_) return;
  next_watch_ = now + std::chrono::milliseconds(options_.monitor_interval_ms);
  try {
    if (auto why = rendezvous_->ended()) {
      remote_ended_ = true;
      remote_failure_ = "the job was ended by " + *why;
      stop_for(*remote_failure_);
    } else if (auto failed = rendezvous_->failure(round_)) {
      remote_failure_ = *failed;
      stop_for("round " + std::to_string(round_) + " failed on " + *failed);
    }
  } catch (const RendezvousError& error) {
    rendezvous_lost_ = error.what();
    stop_for(error.what());
  }
}

void Launcher::stop_for(const std::string& reason) {
  stopping_ = true;
  say(reason + "; stopping " + plural(running_count(), "local rank") + " (SIGTERM, then SIGKILL after " +
      format_seconds(options_.grace_period_s) + ")");
  stop_running_ranks(SIGTERM);
  start_grace_period();
}

void Launcher::supervise() {
  std::optional<Clock::time_point> drain_deadline;
  for (;;) {
    std::vector<pollfd> watched = {{g_signal_pipe[0], POLLIN, 0}};
    std::vector<OutputRelay*> relays;
    for (Rank& rank : ranks_) {
      for (OutputRelay* relay : {&rank.out, &rank.err}) {
        if (relay->fd < 0) continue;
        watched.push_back({relay->fd, POLLIN, 0});
        relays.push_back(relay);
      }
    }
    auto now = Clock::now();
    auto timeout = std::chrono::milliseconds(options_.monitor_interval_ms);
    for (const auto& deadline : {kill_deadline_, drain_deadline}) {
      if (!deadline) continue;
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - now);
      timeout = std::clamp(left, std::chrono::milliseconds(0), timeout);
    }
    poll(watched.data(), watched.size(), static_cast<int>(timeout.count()));

    if (watched[0].revents) handle_signals();
    for (size_t i = 0; i < relays.size(); ++i) {
      if (watched[i + 1].revents) relays[i]->read_some();
    }
    reap_exited();
    watch_other_nodes();

    now = Clock::now();
    if (kill_deadline_ && now >= *kill_deadline_) {
      for (const Rank& rank : ranks_) {
        if (!rank.running) continue;
        say("rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ") still running " +
            format_seconds(options_.grace_period_s) + " after being told to stop; sending SIGKILL");
      }
      stop_running_ranks(SIGKILL);
      kill_deadline_.reset();
    }
    if (running_count() == 0) {
      if (relays.empty()) break;
      if (!drain_deadline) drain_deadline = now + kDrainTimeout;
      if (now >= *drain_deadline) break;
    }
  }
  for (Rank& rank : ranks_) {
    rank.out.finish();
    rank.err.finish();
  }
}

}  // namespace

int launch_process_group(const LaunchOptions& options) { return Launcher(options).run(); }

}  // namespace titan::cli
