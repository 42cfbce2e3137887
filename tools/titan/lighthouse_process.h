// `titan launch --start-lighthouse PORT`: torchft's Lighthouse (the real
// server, through scripts/lighthouse.py) beside a replica group's ranks, so
// that one launcher of a fault-tolerant job can host the coordinator.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace titan::cli {

struct LighthouseOptions {
  int port = 0;
  int min_replicas = 1;
  std::vector<std::string> extra_args;  // torchft_lighthouse's own options, passed as given
};

class LighthouseProcess {
 public:
  // Starts it and waits until it accepts connections; throws
  // std::runtime_error (with what to do) when it cannot be started or exits.
  explicit LighthouseProcess(const LighthouseOptions& options);
  ~LighthouseProcess();  // SIGTERM, then SIGKILL after 2 s
  LighthouseProcess(const LighthouseProcess&) = delete;
  LighthouseProcess& operator=(const LighthouseProcess&) = delete;

  // What the ranks on this machine put in TORCHFT_LIGHTHOUSE.
  std::string local_address() const;

 private:
  void stop();

  const LighthouseOptions options_;
  pid_t pid_ = 0;
};

}  // namespace titan::cli
