// DistRuntime: TCPStore rendezvous (rank 0 hosts it unless torchrun's agent
// does), then process groups whose keys live under a per-attempt prefix so a
// restarted job never reads a previous attempt's keys. Every group has a
// Gloo backend for CPU tensors; with backend "nccl" (CUDA runs) it also has
// an NCCL backend for CUDA tensors, as PyTorch's "cpu:gloo,cuda:nccl".
#include "titan/dist_runtime.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef TITAN_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <map>

#include "process_group_comm.hpp"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

struct DistRuntime::Impl {
  DistTimeouts timeouts;
  std::string backend;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<::gloo::transport::Device> device;
  std::unique_ptr<Comm> world_group;
  std::map<std::string, int> groups_named;  // a name reused (e.g. by a second mesh) gets a fresh prefix
};

namespace {

std::string attempt_prefix() {
  for (const char* name : {"TORCHELASTIC_RESTART_COUNT", "TITAN_RESTART_COUNT"}) {
    const char* value = std::getenv(name);
    if (value && *value) return std::string("/titan/attempt_") + value;
  }
  return "/titan/attempt_0";
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

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
    impl_->device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    impl_->world_group = new_group("world", {0});
    return;
  }
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
    throw Error("rank " + std::to_string(world.rank) + " could not join the job's TCPStore at " + world.master_addr +
                ":" + std::to_string(world.master_port) + " within comm.init_timeout_seconds (" +
                std::to_string(timeouts.init.count() / 1000) + " s): " + error.what_without_backtrace() +
                ". Check MASTER_ADDR/MASTER_PORT, that every rank was started, and that the port is free");
  } catch (const std::exception& error) {
    throw Error("rank " + std::to_string(world.rank) + " could not join the job's TCPStore at " + world.master_addr +
                ":" + std::to_string(world.master_port) + ": " + error.what() +
                ". Check MASTER_ADDR/MASTER_PORT, that every rank was started, and that the port is free");
  }
  // Loopback jobs bind Gloo to loopback: the host name may not resolve.
  impl_->device = is_loopback(world.master_addr) ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                 : c10d::ProcessGroupGloo::createDefaultDevice();
  std::vector<int> everyone;
  for (int rank = 0; rank < world.world_size; ++rank) everyone.push_back(rank);
  impl_->world_group = new_group("world", everyone);
  spdlog::info("joined {} ranks ({}) through {}:{}", world.world_size, world.source, world.master_addr,
               world.master_port);
}

DistRuntime::~DistRuntime() = default;

Comm& DistRuntime::world_group() { return *impl_->world_group; }

std::unique_ptr<Comm> DistRuntime::new_group(const std::string& name, const std::vector<int>& ranks) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == world_.rank) index = static_cast<int>(i);
  }
  if (index < 0) throw Error("process group '" + name + "' does not contain this rank");
  // The key names the members too, and members create their groups in the
  // same order, so every member counts the same instance.
  std::string key = name + "/ranks";
  for (int rank : ranks) key += "_" + std::to_string(rank);
  int instance = impl_->groups_named[key]++;
  auto store = c10::make_intrusive<c10d::PrefixStore>("group/" + key + "#" + std::to_string(instance), impl_->store);
  const int size = static_cast<int>(ranks.size());
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, index, size);
  try {
    // Connecting waits on the store with the store's (init) timeout.
    auto options = c10d::ProcessGroupGloo::Options::create(impl_->timeouts.collective);
    options->devices.push_back(impl_->device);
    options->threads = 2;
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, index, size, options);
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
#ifdef TITAN_WITH_CUDA
    if (impl_->backend == "nccl") {
      // NCCL connects lazily, at the group's first CUDA collective, on the
      // current CUDA device (the trainer sets it from LOCAL_RANK).
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = impl_->timeouts.collective;
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, index, size, nccl_options);
      group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
      group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
    }
#endif
  } catch (const c10::Error& error) {
    throw Error("could not create process group '" + name + "': " + error.what_without_backtrace() +
                " (every member rank must create it; check that all ranks are alive)");
  } catch (const std::exception& error) {
    throw Error("could not create process group '" + name + "': " + error.what());
  }
  return make_process_group_comm(group, name, ranks, impl_->timeouts.collective);
}

}  // namespace titan
