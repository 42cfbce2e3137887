// `titan launch --nproc-per-node N [options] -- PROGRAM ARGS...`: torchrun
// for Titan; parses the launcher's options and hands the ranks to
// process_group_launcher.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <stdexcept>

#include "commands.h"
#include "process_group_launcher.h"

namespace titan::cli {

namespace {

const char* kLaunchUsage = R"(usage: titan launch --nproc-per-node N [options] [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this machine and supervises them, like
  torchrun --nproc_per_node N --no_python PROGRAM ARGS...
e.g. titan launch --nproc-per-node 2 -- build/bin/titan train CONFIG

Each rank gets torchrun's environment: RANK (= node rank * N + LOCAL_RANK),
WORLD_SIZE (= N * nnodes), LOCAL_RANK, LOCAL_WORLD_SIZE (= N), GROUP_RANK,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT and TITAN_RESTART_COUNT
(the attempt, 0 first), TORCHELASTIC_MAX_RESTARTS; with N > 1 and no
OMP_NUM_THREADS of your own, OMP_NUM_THREADS = this machine's cores / N (at
least 1; torchrun sets 1), so that the ranks share the cores instead of each
starting a thread per core. Rank 0 hosts the job's
TCPStore (no agent store). Every line a rank writes comes out prefixed with
"[rank R] ", stdout on stdout and stderr on stderr; stdin is /dev/null.

options:
  --nproc-per-node N       ranks on this machine (required)
  --nnodes M               machines in the job (default 1)
  --node-rank R            this machine, 0..M-1 (default 0)
  --master-addr A          the host of rank 0's store (default 127.0.0.1)
  --master-port P          its port (default: $MASTER_PORT, else 29500)
  --max-restarts K         restart all ranks up to K times after a failure (default 0)
  --rdzv-port P            several machines: the port of the launchers' own store,
                           hosted by node 0's launcher (default --master-port + 1)
  --rdzv-timeout-s S       several machines: how long the launchers wait for every
                           node to join a round (start, each restart) (default 900)
  --grace-period-s S       seconds between SIGTERM and SIGKILL when stopping ranks (default 30)
  --monitor-interval-ms X  how often the ranks are checked (default 100)
  --replica-group-id I     fault tolerance: this launch is replica group I of
  --num-replica-groups G   G (both, or neither); the ranks get REPLICA_GROUP_ID
                           and NUM_REPLICA_GROUPS as torchft's launcher sets them,
                           the defaults of fault_tolerance.replica_id and group_size
  --start-lighthouse P     fault tolerance: also run torchft's Lighthouse (scripts/lighthouse.py,
                           bound to [::]:P) while this launcher lives; its ranks get
                           TORCHFT_LIGHTHOUSE=http://127.0.0.1:P, the other groups' launches
                           point at http://THIS_HOST:P. Its dashboard is that address
  --lighthouse-min-replicas N  the Lighthouse's --min_replicas (default 1)
  --lighthouse-arg ARG     one more option for the Lighthouse, as torchft_lighthouse takes it
                           (e.g. --lighthouse-arg=--heartbeat_timeout_ms=2000; repeatable)
torchrun's spellings (--nproc_per_node, --master_port, ...) work too.

When a rank exits non-zero or dies from a signal, the other ranks get SIGTERM
(SIGKILL after the grace period) and are reaped; then all ranks restart, or
the launcher exits 1. SIGINT and SIGTERM are forwarded to every rank (a
second one kills them); the exit code is then 0 if every rank exits 0, else
128 + the signal. A PROGRAM that cannot be started exits 127. Each rank runs
in its own process group, and whatever a rank leaves running when it exits
is killed.

Several machines: run titan launch on each with the same --nnodes,
--master-addr, --master-port and --max-restarts and its own --node-rank.
The launchers meet in a store of their own that node 0's launcher hosts on
--rdzv-port (like torchrun's c10d rendezvous): all nodes start each round
together; when a rank fails on any node, that node announces it there and
every node stops its ranks, then all join the next round and restart
(TITAN_RESTART_COUNT is the round, the same on every node) or, with no
restarts left, exit 1. A node missing from a round for --rdzv-timeout-s ends
the job on every node, naming it; if node 0's launcher dies, the job ends.
A launcher's ranks die with it (SIGKILL). The ranks' Gloo connections use
GLOO_SOCKET_IFNAME's interfaces (e.g. eth0, or eth0,eth1), else the interface
whose address routes to --master-addr; each rank logs which.
)";

// A mistake in the launcher's own arguments: usage and exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

long parse_integer(const std::string& option, const std::string& text, long minimum, long maximum) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < minimum || value > maximum) {
    std::string range = maximum == INT_MAX ? ">= " + std::to_string(minimum)
                                           : "in " + std::to_string(minimum) + ".." + std::to_string(maximum);
    throw UsageError(option + ": expected an integer " + range + ", got '" + text + "'");
  }
  return value;
}

double parse_seconds(const std::string& option, const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0) || value > 1e6) {
    throw UsageError(option + ": expected a number of seconds >= 0, got '" + text + "'");
  }
  return value;
}

// Returns nullopt when help was asked for.
std::optional<LaunchOptions> parse_launch_args(const Args& args) {
  LaunchOptions options;
  if (const char* port = std::getenv("MASTER_PORT"); port && *port) {
    options.master_port = static_cast<int>(parse_integer("MASTER_PORT (environment)", port, 1, 65535));
  }
  bool has_nproc = false;
  std::string lighthouse_option;  // a Lighthouse option given, which needs --start-lighthouse
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      options.program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (arg.rfind("-", 0) != 0) {  // the program: it and everything after are its own
      options.program.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    if (arg == "-h" || arg == "--help") return std::nullopt;
    std::string name = arg.substr(0, arg.find('='));
    for (size_t c = 2; c < name.size(); ++c) {
      if (name[c] == '_') name[c] = '-';
    }
    std::optional<std::string> inline_value;
    if (arg.find('=') != std::string::npos) inline_value = arg.substr(arg.find('=') + 1);
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
      return args[++i];
    };
    if (name == "--nproc-per-node") {
      options.nproc_per_node = static_cast<int>(parse_integer(name, value(), 1, 4096));
      has_nproc = true;
    } else if (name == "--nnodes") {
      options.nnodes = static_cast<int>(parse_integer(name, value(), 1, 1 << 20));
    } else if (name == "--node-rank") {
      options.node_rank = static_cast<int>(parse_integer(name, value(), 0, INT_MAX));
    } else if (name == "--master-addr") {
      options.master_addr = value();
      if (options.master_addr.empty()) throw UsageError("--master-addr: expected a host name or address");
    } else if (name == "--master-port") {
      options.master_port = static_cast<int>(parse_integer(name, value(), 1, 65535));
    } else if (name == "--max-restarts") {
      options.max_restarts = static_cast<int>(parse_integer(name, value(), 0, 1000000));
    } else if (name == "--monitor-interval-ms") {
      options.monitor_interval_ms = static_cast<int>(parse_integer(name, value(), 1, 60000));
    } else if (name == "--rdzv-port") {
      options.rdzv_port = static_cast<int>(parse_integer(name, value(), 1, 65535));
    } else if (name == "--rdzv-timeout-s") {
      options.rdzv_timeout_s = parse_seconds(name, value());
      if (options.rdzv_timeout_s <= 0) throw UsageError("--rdzv-timeout-s: expected a number of seconds > 0");
    } else if (name == "--grace-period-s") {
      options.grace_period_s = parse_seconds(name, value());
    } else if (name == "--replica-group-id") {
      options.replica_group_id = static_cast<int>(parse_integer(name, value(), 0, INT_MAX));
    } else if (name == "--num-replica-groups") {
      options.num_replica_groups = static_cast<int>(parse_integer(name, value(), 1, INT_MAX));
    } else if (name == "--start-lighthouse") {
      options.lighthouse.port = static_cast<int>(parse_integer(name, value(), 1, 65535));
    } else if (name == "--lighthouse-min-replicas") {
      options.lighthouse.min_replicas = static_cast<int>(parse_integer(name, value(), 1, INT_MAX));
      lighthouse_option = name;
    } else if (name == "--lighthouse-arg") {
      options.lighthouse.extra_args.push_back(value());
      lighthouse_option = name;
    } else {
      throw UsageError("unknown option '" + arg + "'");
    }
  }
  if (!has_nproc) throw UsageError("--nproc-per-node is required");
  if (!lighthouse_option.empty() && options.lighthouse.port == 0) {
    throw UsageError(lighthouse_option + " configures the Lighthouse that --start-lighthouse P starts; give that too");
  }
  if ((options.replica_group_id >= 0) != (options.num_replica_groups >= 0)) {
    throw UsageError("--replica-group-id and --num-replica-groups go together");
  }
  if (options.replica_group_id >= options.num_replica_groups && options.replica_group_id >= 0) {
    throw UsageError("--replica-group-id " + std::to_string(options.replica_group_id) +
                     " must be below --num-replica-groups " + std::to_string(options.num_replica_groups));
  }
  if (options.node_rank >= options.nnodes) {
    throw UsageError("--node-rank " + std::to_string(options.node_rank) + " must be below --nnodes " +
                     std::to_string(options.nnodes));
  }
  if (static_cast<long long>(options.nproc_per_node) * options.nnodes > INT_MAX) {
    throw UsageError("--nproc-per-node times --nnodes is too large");
  }
  if (options.program.empty() || options.program[0].empty()) throw UsageError("a PROGRAM to launch is required");
  if (options.rdzv_port == 0) {
    if (options.nnodes > 1 && options.master_port == 65535) {
      throw UsageError("--master-port 65535 leaves no port for the launchers' rendezvous: give --rdzv-port");
    }
    options.rdzv_port = options.master_port + 1;
  }
  if (options.nnodes > 1 && options.rdzv_port == options.master_port) {
    throw UsageError("--rdzv-port must differ from --master-port (rank 0's store uses that one)");
  }
  const int lighthouse = options.lighthouse.port;
  if (lighthouse != 0 &&
      (lighthouse == options.master_port || (options.nnodes > 1 && lighthouse == options.rdzv_port))) {
    throw UsageError("--start-lighthouse " + std::to_string(lighthouse) +
                     ": the port is the job's store's (--master-port / --rdzv-port); choose another");
  }
  return options;
}

}  // namespace

int launch_command(const Args& args) {
  std::optional<LaunchOptions> options;
  try {
    options = parse_launch_args(args);
  } catch (const UsageError& error) {
    std::cerr << "titan launch: " << error.what() << "\n\n" << kLaunchUsage;
    return 2;
  }
  if (!options) {
    std::cout << kLaunchUsage;
    return 0;
  }
  std::cout.flush();
  std::optional<LighthouseProcess> lighthouse;
  if (options->lighthouse.port != 0) {
    try {
      lighthouse.emplace(options->lighthouse);
    } catch (const std::runtime_error& error) {
      std::cerr << "titan launch: " << error.what() << "\n";
      return kLaunchRankFailed;
    }
    setenv("TORCHFT_LIGHTHOUSE", lighthouse->local_address().c_str(), 1);
    std::cerr << "titan launch: torchft's Lighthouse listens on port " << options->lighthouse.port
              << " (min_replicas " << options->lighthouse.min_replicas << "; its dashboard at http://HOST:"
              << options->lighthouse.port << "/); the ranks get TORCHFT_LIGHTHOUSE=" << lighthouse->local_address()
              << "\n";
  }
  return launch_process_group(*options);
}

}  // namespace titan::cli
