// Runs N local ranks of one program under the torchrun environment, relays
// their output line by line, and stops, restarts or reaps them as a group.
// Plain POSIX; across nodes the launchers meet in node_rendezvous.h (a
// c10d TCPStore, LibTorch kept behind that header).
#pragma once
#include <string>
#include <vector>

#include "lighthouse_process.h"

namespace titan::cli {

struct LaunchOptions {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int max_restarts = 0;
  int monitor_interval_ms = 100;
  double grace_period_s = 30;
  // The launchers' rendezvous across nodes (--nnodes > 1, node_rendezvous.h):
  // node 0's launcher hosts it on this port (0: master_port + 1).
  int rdzv_port = 0;
  double rdzv_timeout_s = 900;  // torchrun's join timeout
  // Fault tolerance: this launch is replica group `replica_group_id` of
  // `num_replica_groups` (-1: not said), told to the ranks as torchft's
  // launcher tells them (REPLICA_GROUP_ID, NUM_REPLICA_GROUPS).
  int replica_group_id = -1;
  int num_replica_groups = -1;
  LighthouseOptions lighthouse;  // --start-lighthouse (port 0: none)
  std::vector<std::string> program;  // the program and its arguments
};

// Exit codes of launch_process_group besides the ranks' own outcome.
constexpr int kLaunchRankFailed = 1;
constexpr int kLaunchCannotExec = 127;

// Runs the ranks until all exit 0 (returns 0), one fails with no restarts
// left (kLaunchRankFailed), the program cannot be started
// (kLaunchCannotExec), or SIGINT/SIGTERM arrives (128 + signal, or 0 when
// every rank then exits 0).
int launch_process_group(const LaunchOptions& options);

}  // namespace titan::cli
