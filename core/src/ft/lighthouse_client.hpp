// A client of torchft's Lighthouse (`torchft_lighthouse`, the coordinator
// that admits replica groups into a quorum each step), behind a plain C++17
// interface: the gRPC code (core/lighthouse/) compiles on its own, without
// LibTorch, and nothing else sees gRPC or protobuf.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace titan::ft {

// One replica group as the Lighthouse knows it (torchft's QuorumMember).
struct QuorumMember {
  std::string replica_id;
  std::string address;        // where the group can be reached (informational here)
  std::string store_address;  // host:port of the group's TCPStore, where a quorum's groups meet
  int64_t step = 0;           // steps the group has committed
  uint64_t world_size = 1;    // ranks in the group
  bool shrink_only = false;
  int64_t commit_failures = 0;  // steps discarded since the last commit
  std::string data;             // JSON
};

struct Quorum {
  int64_t quorum_id = 0;
  std::vector<QuorumMember> participants;
  // When the Lighthouse handed it out (ns since the epoch): new on every
  // answer, even when the quorum (id and members) is unchanged.
  int64_t created_ns = 0;
};

class LighthouseClient {
 public:
  virtual ~LighthouseClient() = default;
  // Tells the Lighthouse the group is alive; throws titan::Error when it
  // cannot be reached within `timeout`.
  virtual void heartbeat(const std::string& replica_id, std::chrono::milliseconds timeout) = 0;
  // Asks to join the next quorum and waits (a long poll) until the
  // Lighthouse issues one that holds `requester`; throws titan::Error after
  // `timeout`, naming the Lighthouse and what it last said.
  virtual Quorum quorum(const QuorumMember& requester, std::chrono::milliseconds timeout) = 0;
};

// `address` without its "http://" or "https://": "host:port" (what gRPC dials).
inline std::string lighthouse_host_port(const std::string& address) {
  for (const std::string scheme : {"http://", "https://"}) {
    if (address.rfind(scheme, 0) == 0) return address.substr(scheme.size());
  }
  return address;
}

// `address`: as torchft's TORCHFT_LIGHTHOUSE, "http://host:port" or "host:port".
// Connecting is lazy: an unreachable Lighthouse shows in the first call.
std::unique_ptr<LighthouseClient> connect_lighthouse(const std::string& address);

}  // namespace titan::ft
