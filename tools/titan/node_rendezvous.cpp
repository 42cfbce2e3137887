// NodeRendezvous over a c10d TCPStore (see node_rendezvous.h for the keys).
#include "node_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace titan::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// The local address of the route to `host` (a UDP connect sends nothing),
// else the host name.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string result;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
    for (addrinfo* entry = found; entry && result.empty(); entry = entry->ai_next) {
      int fd = socket(entry->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_storage local{};
      socklen_t length = sizeof local;
      if (connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
        char name[INET6_ADDRSTRLEN] = {};
        const void* address = local.ss_family == AF_INET
                                  ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                                  : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
        if (inet_ntop(local.ss_family, address, name, sizeof name)) result = name;
      }
      close(fd);
    }
    freeaddrinfo(found);
  }
  if (result.empty()) {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    result = name;
  }
  return result;
}

std::string seconds(double value) {
  char out[32];
  std::snprintf(out, sizeof out, "%g s", value);
  return out;
}

}  // namespace

struct NodeRendezvous::Impl {
  LaunchOptions options;
  std::string address;
  std::string endpoint;  // "A:P" of the store, for messages
  c10::intrusive_ptr<c10d::TCPStore> store;

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<long long>(options.rdzv_timeout_s * 1000));
  }

  std::string lost(const std::exception& error) const {
    return "lost the launchers' rendezvous store at " + endpoint + " (" + first_line(error.what()) +
           "): node 0's launcher, which hosts it, is gone or cannot be reached; the job ends";
  }

  static std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

  // "node 1 (10.0.0.2)", its address as it published it when it connected.
  std::string describe(int node) {
    std::string key = "node/" + std::to_string(node);
    if (store->check({key})) return "node " + std::to_string(node) + " (" + text(store->get(key)) + ")";
    return "node " + std::to_string(node) + " (address unknown: it never reached the store)";
  }
};

NodeRendezvous::NodeRendezvous(const LaunchOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->endpoint = options.master_addr + ":" + std::to_string(options.rdzv_port);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(options.rdzv_port);
  store_options.isServer = options.node_rank == 0;
  store_options.numWorkers = std::nullopt;
  store_options.waitWorkers = false;
  store_options.timeout = impl_->timeout();
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
  } catch (const std::exception& error) {
    std::string what = Impl::first_line(error.what());
    if (options.node_rank == 0) {
      throw RendezvousError("node 0 cannot host the launchers' rendezvous store on port " +
                            std::to_string(options.rdzv_port) + " (" + what +
                            "); free the port or choose another with --rdzv-port on every node");
    }
    throw RendezvousError("node " + std::to_string(options.node_rank) + " could not reach the launchers' rendezvous store at " +
                          impl_->endpoint + " within --rdzv-timeout-s (" + seconds(options.rdzv_timeout_s) + "): " +
                          what + ". Is node 0's titan launch running, with the same --master-addr and --rdzv-port?");
  }
  impl_->address = local_address_towards(options.master_addr, options.rdzv_port);
  try {
    impl_->store->set("node/" + std::to_string(options.node_rank), bytes(impl_->address));
  } catch (const std::exception& error) {
    throw RendezvousError(impl_->lost(error));
  }
}

NodeRendezvous::~NodeRendezvous() = default;

const std::string& NodeRendezvous::address() const { return impl_->address; }

void NodeRendezvous::join(int round) {
  auto& store = *impl_->store;
  const auto& options = impl_->options;
  std::string prefix = "round/" + std::to_string(round) + "/joined/";
  std::vector<std::string> keys;
  for (int node = 0; node < options.nnodes; ++node) keys.push_back(prefix + std::to_string(node));
  try {
    store.set(prefix + std::to_string(options.node_rank), bytes(impl_->address));
  } catch (const std::exception& error) {
    throw RendezvousError(impl_->lost(error));
  }
  try {
    store.wait(keys, impl_->timeout());
    return;
  } catch (const std::exception& error) {
    // A timeout, or the store is gone: which one, the next calls tell.
    std::string missing;
    size_t count = 0;
    try {
      for (int node = 0; node < options.nnodes; ++node) {
        if (store.check({keys[static_cast<size_t>(node)]})) continue;
        missing += (missing.empty() ? "" : ", ") + impl_->describe(node);
        ++count;
      }
    } catch (const std::exception& lost) {
      throw RendezvousError(impl_->lost(lost));
    }
    if (count == 0) throw RendezvousError(impl_->lost(error));
    throw RendezvousError(missing + " did not join round " + std::to_string(round) +
                          " of the job within --rdzv-timeout-s (" + seconds(options.rdzv_timeout_s) +
                          "); the job ends on every node. Restart it on all nodes (checkpoints resume it)");
  }
}

void NodeRendezvous::report_failure(int round, const std::string& what) {
  std::string message = "node " + std::to_string(impl_->options.node_rank) + " (" + impl_->address + "): " + what;
  try {
    impl_->store->compareSet("round/" + std::to_string(round) + "/failed", {}, bytes(message));
  } catch (const std::exception& error) {
    throw RendezvousError(impl_->lost(error));
  }
}

std::optional<std::string> NodeRendezvous::failure(int round) {
  std::string key = "round/" + std::to_string(round) + "/failed";
  try {
    if (impl_->store->check({key})) return text(impl_->store->get(key));
  } catch (const std::exception& error) {
    throw RendezvousError(impl_->lost(error));
  }
  return std::nullopt;
}

void NodeRendezvous::end_job(const std::string& why) {
  std::string message = "node " + std::to_string(impl_->options.node_rank) + " (" + impl_->address + "): " + why;
  try {
    impl_->store->compareSet("ended", {}, bytes(message));
  } catch (const std::exception&) {
    // Node 0 is gone: the others learn it from the store anyway.
  }
}

std::optional<std::string> NodeRendezvous::ended() {
  try {
    if (impl_->store->check({"ended"})) return text(impl_->store->get("ended"));
  } catch (const std::exception& error) {
    throw RendezvousError(impl_->lost(error));
  }
  return std::nullopt;
}

std::optional<std::string> NodeRendezvous::finish(int round) {
  const auto& options = impl_->options;
  std::string prefix = "round/" + std::to_string(round) + "/done/";
  try {
    impl_->store->set(prefix + std::to_string(options.node_rank), bytes(impl_->address));
  } catch (const std::exception& error) {
    throw RendezvousError(impl_->lost(error));
  }
  if (options.node_rank != 0) return std::nullopt;
  auto deadline = Clock::now() + impl_->timeout();
  auto interval = std::chrono::milliseconds(options.monitor_interval_ms);
  for (;;) {
    if (auto failed = failure(round)) return failed;
    if (auto why = ended()) return "the job was ended by " + *why;
    std::string missing;
    for (int node = 0; node < options.nnodes; ++node) {
      if (!impl_->store->check({prefix + std::to_string(node)})) missing += (missing.empty() ? "" : ", ") + impl_->describe(node);
    }
    if (missing.empty()) return std::nullopt;
    if (Clock::now() >= deadline) {
      throw RendezvousError(missing + " did not report the end of its ranks within --rdzv-timeout-s (" +
                            seconds(options.rdzv_timeout_s) + ") after node 0's ranks finished");
    }
    std::this_thread::sleep_for(interval);
  }
}

void NodeRendezvous::leave(int round) {
  const auto& options = impl_->options;
  std::string prefix = "round/" + std::to_string(round) + "/left/";
  try {
    impl_->store->set(prefix + std::to_string(options.node_rank), bytes(impl_->address));
    if (options.node_rank != 0) return;
    std::vector<std::string> keys;
    for (int node = 1; node < options.nnodes; ++node) keys.push_back(prefix + std::to_string(node));
    double bound = std::min(options.rdzv_timeout_s, options.grace_period_s + 5);
    impl_->store->wait(keys, std::chrono::milliseconds(static_cast<long long>(bound * 1000)));
  } catch (const std::exception&) {
    // A node that is gone or slow: leaving goes ahead without it.
  }
}

}  // namespace titan::cli
