// The launchers' own rendezvous across machines (titan launch --nnodes > 1),
// as torchrun's c10d rendezvous: node 0's launcher hosts a c10d TCPStore on
// --rdzv-port (default --master-port + 1; the ranks' own store stays on
// --master-port, hosted by rank 0), every launcher joins it, and the
// launchers agree there on each round (attempt) of the job:
//   node/<n>                 node n's address (as it reaches node 0)
//   round/<r>/joined/<n>     node n is ready to start round r's ranks
//   round/<r>/failed         the first failure of round r, "node n: what"
//   round/<r>/done/<n>       node n's ranks all exited 0 in round r
//   round/<r>/left/<n>       node n ends the job after round r failed
//   ended                    a launcher ended the job (a signal): no restart
// Waits are blocking waits with timeouts, and the watch for a failure is one
// check per monitor interval; nothing spins. LibTorch stays behind this
// header, so the supervisor (process_group_launcher) is plain POSIX.
#pragma once
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "process_group_launcher.h"

namespace titan::cli {

// The rendezvous cannot go on: a node missed the timeout, node 0's store is
// gone. what() is the message for the user.
struct RendezvousError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class NodeRendezvous {
 public:
  // Node 0 hosts the store; the others connect within --rdzv-timeout-s.
  explicit NodeRendezvous(const LaunchOptions& options);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  // This node's address as the others see it ("10.0.0.2").
  const std::string& address() const;
  // Blocks until every node has joined round `round`, or throws naming the
  // nodes that did not join within --rdzv-timeout-s.
  void join(int round);
  // Announces that round `round` failed here; the first report wins.
  void report_failure(int round, const std::string& what);
  // The failure of round `round` if one was reported (by any node). Throws
  // when node 0's store is gone.
  std::optional<std::string> failure(int round);
  // Ends the job on every node (no restart), e.g. after SIGINT.
  void end_job(const std::string& why);
  // Who ended the job and why, if one did.
  std::optional<std::string> ended();
  // This node's ranks all exited 0 in round `round`. On node 0, waits
  // (bounded by --rdzv-timeout-s) until every node has said so or one
  // failed: the store must outlive the others' last reports. Returns the
  // failure, if any.
  std::optional<std::string> finish(int round);
  // This node leaves the job after round `round` failed for good. Node 0
  // first waits (up to --grace-period-s + 5 s) for the others to leave, so
  // that they read the failure from its store before the store goes.
  void leave(int round);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan::cli
