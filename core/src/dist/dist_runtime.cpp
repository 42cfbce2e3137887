// DistRuntime: TCPStore rendezvous (rank 0 hosts it unless torchrun's agent
// does), then process groups whose keys live under a per-attempt prefix so a
// restarted job never reads a previous attempt's keys. Every group has a
// Gloo backend for CPU tensors; with backend "nccl" (CUDA runs) it also has
// an NCCL backend for CUDA tensors, as PyTorch's "cpu:gloo,cuda:nccl".
// Gloo's interface is chosen as PyTorch users expect (network_interface.hpp).
#include "titan/dist_runtime.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "process_group_comm.hpp"
#include "titan/compat.hpp"
#include "titan/cuda_runtime.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/network_interface.hpp"

namespace titan {

struct DistRuntime::Impl {
  DistTimeouts timeouts;
  std::string backend;
  c10::intrusive_ptr<c10d::Store> store;
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;  // one per interface
  std::string network;  // "interface eth0 (10.0.0.2)", for messages
  std::unique_ptr<Comm> world_group;
  std::map<std::string, int> groups_named;  // a name reused (e.g. by a second mesh) gets a fresh prefix
  GroupMaker simulated;  // set: `titan plan`'s dry run, whose groups are simulated
};

namespace {

std::string attempt_prefix() {
  for (const char* name : {"TORCHELASTIC_RESTART_COUNT", "TITAN_RESTART_COUNT"}) {
    const char* value = std::getenv(name);
    if (value && *value) return std::string("/titan/attempt_") + value;
  }
  return "/titan/attempt_0";
}

std::string env_text(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The Gloo devices of a distributed job, logged with why they were chosen.
// NCCL reads NCCL_SOCKET_IFNAME itself (titan launch passes the environment
// on); it is logged so both choices sit side by side.
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const World& world, const std::string& backend,
                                                                      std::string& described) {
  NetworkChoice choice = choose_gloo_network(env_text("GLOO_SOCKET_IFNAME"), world.master_addr, world.master_port,
                                             system_network_facts());
  described = choice.describe();
  spdlog::info("gloo: {} ({})", described, choice.reason);
  if (backend == "nccl") {
    std::string nccl = env_text("NCCL_SOCKET_IFNAME");
    spdlog::info("nccl: {}", nccl.empty() ? "NCCL_SOCKET_IFNAME is unset: NCCL picks its interface itself"
                                          : "NCCL_SOCKET_IFNAME=" + nccl);
  }
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  for (const auto& endpoint : choice.endpoints) {
    try {
      devices.push_back(endpoint.by_name ? c10d::ProcessGroupGloo::createDeviceForInterface(endpoint.interface)
                                         : c10d::ProcessGroupGloo::createDeviceForHostname(endpoint.address));
    } catch (const c10::Error& error) {
      throw Error("rank " + std::to_string(world.rank) + " could not open a Gloo device on interface " +
                  endpoint.interface + " (" + endpoint.address + "): " + error.what_without_backtrace());
    }
  }
  return devices;
}

std::string endpoint_key(int rank) { return "titan/gloo_endpoint/" + std::to_string(rank); }

std::string store_failure(const World& world, const std::string& network) {
  return "rank " + std::to_string(world.rank) + " could not join the job's TCPStore at " + world.master_addr + ":" +
         std::to_string(world.master_port) + " from " + network;
}

// torchrun hands out rank 0's host name, which resolves to loopback in many
// containers: the other nodes then dial themselves.
std::string loopback_hint(const World& world, const std::string& network) {
  if (world.local_world_size < world.world_size && network.find("(127.") != std::string::npos) {
    return ". MASTER_ADDR " + world.master_addr + " is loopback but the job has ranks on other hosts: give rank 0's "
           "host an address the others reach (titan launch --master-addr, or torchrun --local-addr on each node)";
  }
  return "";
}

std::string store_hint(const World& world, const std::string& network) {
  std::string loopback = loopback_hint(world, network);
  return loopback.empty() ? ". Check MASTER_ADDR/MASTER_PORT, that every rank was started, and that the port is free"
                          : loopback;
}

// "rank 1 on interface eth0 (10.0.0.2), ...": the other members' published
// interfaces (at most 8: a message, not a roster), read without waiting,
// as the store may be what failed.
std::string describe_peers(c10d::Store& store, int self, const std::vector<int>& ranks) {
  std::string peers;
  int named = 0;
  for (int rank : ranks) {
    if (rank == self) continue;
    if (++named > 8) {
      peers += ", ...";
      break;
    }
    try {
      if (!store.check({endpoint_key(rank)})) continue;
      auto bytes = store.get(endpoint_key(rank));
      peers += (peers.empty() ? "" : ", ") + std::string("rank ") + std::to_string(rank) + " on " +
               std::string(bytes.begin(), bytes.end());
    } catch (const std::exception&) {
      break;
    }
  }
  return peers;
}

// A group that could not connect, named with both ends' interfaces.
Error group_failure(c10d::Store& store, const std::string& network, std::chrono::milliseconds init, int self,
                    const std::string& name, const std::vector<int>& ranks, const std::string& cause) {
  const std::string peers = describe_peers(store, self, ranks);
  return Error("rank " + std::to_string(self) + " could not connect process group '" + name + "' from " +
               network + (peers.empty() ? "" : " to its peers (" + peers + ")") + " within " +
               "comm.init_timeout_seconds (" + std::to_string(init.count() / 1000) + " s): " + cause +
               " (every member rank must create it; check that all ranks are alive, that each reaches the others' "
               "addresses, and GLOO_SOCKET_IFNAME on each host)");
}

}  // namespace

DistRuntime::DistRuntime(const World& world, const DistTimeouts& timeouts, const std::string& backend)
    : world_(world), impl_(std::make_unique<Impl>()) {
  impl_->timeouts = timeouts;
  impl_->backend = backend;
  if (backend != "gloo" && backend != "nccl") {
    throw Error("comm backend '" + backend + "' is unknown; use gloo (CPU tensors) or nccl (CUDA tensors)");
  }
#ifndef TITAN_WITH_CUDA
  if (backend == "nccl") {
    throw Error("comm backend 'nccl' needs a CUDA build of Titan (TITAN_WITH_CUDA is off); CPU training uses gloo");
  }
#endif
  if (backend == "nccl" && !compat::cuda_available()) {
    throw Error("comm backend 'nccl' needs a CUDA device, and " + compat::cuda_summary() +
                "; set training.device: cpu to train on the CPU with gloo");
  }
  if (!world.distributed()) {
    // One process (e.g. FSDP on one GPU): real groups of size 1, no network.
    impl_->store = c10::make_intrusive<c10d::HashStore>();
    impl_->devices = {c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")};
    impl_->network = "interface lo (127.0.0.1)";
    impl_->world_group = new_group("world", {0});
    return;
  }
  // Chosen before the store, so that a failure to join names the interface.
  impl_->devices = gloo_devices(world, backend, impl_->network);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(world.master_port);
  options.isServer = world.rank == 0 && !world.store_hosted_by_agent;
  options.numWorkers = world.store_hosted_by_agent ? c10::nullopt : c10::optional<size_t>(world.world_size);
  options.waitWorkers = !world.store_hosted_by_agent;
  options.timeout = timeouts.init;
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
    impl_->store = c10::make_intrusive<c10d::PrefixStore>(attempt_prefix(), tcp);
  } catch (const c10::Error& error) {
    throw Error(store_failure(world, impl_->network) + " within comm.init_timeout_seconds (" +
                std::to_string(timeouts.init.count() / 1000) + " s): " + error.what_without_backtrace() +
                store_hint(world, impl_->network));
  } catch (const std::exception& error) {
    throw Error(store_failure(world, impl_->network) + ": " + error.what() + store_hint(world, impl_->network));
  }
  // Where this rank's Gloo listens, for the peers' messages should they
  // fail to connect to it (Gloo's own names no address when unreachable).
  impl_->store->set(endpoint_key(world.rank), std::vector<uint8_t>(impl_->network.begin(), impl_->network.end()));
  impl_->world_group = new_group("world", world.all_ranks());
  spdlog::info("joined {} ranks ({}) through {}:{}", world.world_size, world.source, world.master_addr,
               world.master_port);
}

DistRuntime::DistRuntime(const World& world, GroupMaker simulated) : world_(world), impl_(std::make_unique<Impl>()) {
  if (!simulated) throw Error("DistRuntime: the simulated group maker is empty");
  impl_->simulated = std::move(simulated);
  impl_->world_group = new_group("world", world.all_ranks());
}

DistRuntime::~DistRuntime() = default;


Comm& DistRuntime::world_group() { return *impl_->world_group; }

std::unique_ptr<Comm> DistRuntime::new_group(const std::string& name, const std::vector<int>& ranks) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == world_.rank) index = static_cast<int>(i);
  }
  if (index < 0) throw Error("process group '" + name + "' does not contain this rank");
  if (impl_->simulated) return impl_->simulated(name, ranks);
  // The key names the members too, and members create their groups in the
  // same order, so every member counts the same instance.
  std::string key = name + "/ranks";
  for (int rank : ranks) key += "_" + std::to_string(rank);
  int instance = impl_->groups_named[key]++;
  auto store = c10::make_intrusive<c10d::PrefixStore>("group/" + key + "#" + std::to_string(instance), impl_->store);
  const int size = static_cast<int>(ranks.size());
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, index, size);
  try {
    // Every member arrives first, within the init timeout, so that Gloo's
    // own waits on the store (a fifth of it, below) only cover the moments
    // between arrival and connection.
    store->set("arrived/" + std::to_string(world_.rank), std::vector<uint8_t>{1});
    std::vector<std::string> arrivals;
    for (int rank : ranks) arrivals.push_back("arrived/" + std::to_string(rank));
    store->wait(arrivals, impl_->timeouts.init);
    // Connecting to the peers is joining: it gets the init timeout, then
    // every collective the train timeout. Gloo waits five times its timeout
    // for a pair's first connection, hence a fifth.
    auto connect = std::max(impl_->timeouts.init / 5, std::chrono::milliseconds(100));
    auto options = c10d::ProcessGroupGloo::Options::create(connect);
    options->devices = impl_->devices;
    options->threads = 2;
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, index, size, options);
    gloo->setTimeout(impl_->timeouts.collective);
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    if (impl_->backend == "nccl") {
      // NCCL connects lazily, at the group's first CUDA collective, on the
      // current CUDA device (the trainer sets it from LOCAL_RANK).
      group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL,
                        internal::cuda_runtime()->make_nccl_backend(store, index, size, impl_->timeouts.collective));
      group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
    }
  } catch (const c10::Error& error) {
    throw group_failure(*impl_->store, impl_->network, impl_->timeouts.init, world_.rank, name, ranks,
                        error.what_without_backtrace() + loopback_hint(world_, impl_->network));
  } catch (const std::exception& error) {
    throw group_failure(*impl_->store, impl_->network, impl_->timeouts.init, world_.rank, name, ranks,
                        error.what() + loopback_hint(world_, impl_->network));
  }
  // Named in the group's failures: after a timeout across machines, which
  // hosts were on the other end is the first question.
  const std::string peers = world_.distributed() ? describe_peers(*impl_->store, world_.rank, ranks) : "";
  return internal::make_process_group_comm(group, name, ranks, impl_->timeouts.collective, peers);
}

}  // namespace titan
