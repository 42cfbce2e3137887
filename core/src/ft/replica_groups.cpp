#include "ft/replica_groups.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "dist/process_group_comm.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/network_interface.hpp"

namespace titan {
namespace {

using std::chrono::milliseconds;

nlohmann::json to_json(const ft::Quorum& quorum) {
  nlohmann::json members = nlohmann::json::array();
  for (const ft::QuorumMember& m : quorum.participants) {
    members.push_back({{"replica_id", m.replica_id}, {"address", m.address}, {"store_address", m.store_address},
                       {"step", m.step}, {"world_size", m.world_size}, {"commit_failures", m.commit_failures}});
  }
  return {{"quorum_id", quorum.quorum_id}, {"created_ns", quorum.created_ns}, {"participants", members}};
}

ft::Quorum quorum_from(const nlohmann::json& json) {
  ft::Quorum quorum;
  quorum.quorum_id = json.at("quorum_id").get<int64_t>();
  quorum.created_ns = json.at("created_ns").get<int64_t>();
  for (const auto& m : json.at("participants")) {
    ft::QuorumMember member;
    member.replica_id = m.at("replica_id").get<std::string>();
    member.address = m.at("address").get<std::string>();
    member.store_address = m.at("store_address").get<std::string>();
    member.step = m.at("step").get<int64_t>();
    member.world_size = m.at("world_size").get<uint64_t>();
    member.commit_failures = m.at("commit_failures").get<int64_t>();
    quorum.participants.push_back(member);
  }
  return quorum;
}

// What a cross-group comm is built for: the quorum's id and its members,
// each with its store (a relaunched group's store is new). Not the creation
// time, which the Lighthouse stamps anew on every answer; not the id alone,
// since a restarted Lighthouse counts from 1 again. Every member computes
// the same identity from the same quorum, so they rebuild together.
std::string comm_identity(const ft::Quorum& quorum) {
  std::set<std::string> members;
  for (const ft::QuorumMember& m : quorum.participants) members.insert(m.replica_id + "@" + m.store_address);
  std::string identity = std::to_string(quorum.quorum_id);
  for (const std::string& member : members) identity += " " + member;
  return identity;
}

// Text through a group: its length, then its bytes, from `root`.
std::string broadcast_text(Comm& comm, const std::string& text, int root) {
  at::Tensor size = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  comm.broadcast(size, root);
  at::Tensor bytes = at::empty({size.data_ptr<int64_t>()[0]}, at::kByte);
  if (comm.rank() == root) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  if (bytes.numel() > 0) comm.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

void send_text(Comm& comm, const std::string& text, int peer) {
  comm.send(at::tensor({static_cast<int64_t>(text.size())}, at::kLong), peer);
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  if (bytes.numel() > 0) comm.send(bytes, peer);
}

std::string recv_text(Comm& comm, int peer) {
  at::Tensor size = at::empty({1}, at::kLong);
  comm.recv(size, peer);
  at::Tensor bytes = at::empty({size.data_ptr<int64_t>()[0]}, at::kByte);
  if (bytes.numel() > 0) comm.recv(bytes, peer);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

// Where the other groups reach this rank: fault_tolerance.address, else
// the address Gloo would choose on the route to the Lighthouse
// (GLOO_SOCKET_IFNAME's first interface when set), as the job's own groups
// choose theirs on the route to MASTER_ADDR; not the host name, which
// resolves to loopback in many containers.
std::pair<std::string, std::string> reachable_address(const FaultToleranceConfig& config) {
  if (!config.address.empty()) return {config.address, "fault_tolerance.address"};
  std::string host = ft::lighthouse_host_port(config.lighthouse);
  host = host.substr(0, host.find('/'));
  const auto colon = host.rfind(':');
  int port = 0;
  try {
    port = colon == std::string::npos ? 80 : std::stoi(host.substr(colon + 1));
  } catch (const std::exception&) {
    throw Error("fault_tolerance.lighthouse: '" + config.lighthouse + "' has no port number; expected http://HOST:PORT");
  }
  if (colon != std::string::npos) host = host.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  try {
    const NetworkChoice choice =
        choose_gloo_network(ifname ? ifname : "", host, port, system_network_facts(), "the Lighthouse's host");
    return {choice.endpoints.front().address, choice.reason};
  } catch (const Error& error) {
    throw Error(std::string("fault tolerance: choosing this rank's address on the route to the Lighthouse (") +
                config.lighthouse + "): " + error.what() + "; or set fault_tolerance.address");
  }
}

// A group's name at the Lighthouse, and back.
std::string group_name(int64_t id) { return "titan_ft_" + std::to_string(id); }
int64_t group_id(const std::string& name) { return std::stoll(name.substr(name.rfind('_') + 1)); }

}  // namespace

ReplicaGroups::ReplicaGroups(const FaultToleranceConfig& config, Comm* group, int group_rank, int group_world_size)
    : config_(config),
      replica_id_(group_name(config.replica_id)),
      group_(group),
      group_rank_(group_rank),
      group_world_size_(group_world_size) {
  std::string why;
  std::tie(address_, why) = reachable_address(config_);
  if (group_rank_ == 0) {
    // The group's own store, where a quorum's ranks meet when this group
    // is their primary; any free port, told to the Lighthouse.
    c10d::TCPStoreOptions options;
    options.port = 0;
    options.isServer = true;
    options.waitWorkers = false;
    options.timeout = std::chrono::seconds(config_.timeout_seconds);
    store_ = c10::make_intrusive<c10d::TCPStore>(address_, options);
    store_address_ = address_ + ":" + std::to_string(store_->getPort());
    lighthouse_ = ft::connect_lighthouse(config_.lighthouse);
    heartbeat_thread_ = std::thread([this] { heartbeats(); });
    spdlog::info("fault tolerance: replica group {} ({} of {}), Lighthouse {}, store {} ({})", replica_id_,
                 config_.replica_id, config_.group_size, config_.lighthouse, store_address_, why);
  }
}

ReplicaGroups::~ReplicaGroups() {
  stopping_ = true;
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void ReplicaGroups::heartbeats() {
  bool warned = false;
  while (!stopping_) {
    try {
      lighthouse_->heartbeat(replica_id_, std::chrono::seconds(5));
      warned = false;
    } catch (const std::exception& error) {
      if (!warned) spdlog::warn("fault tolerance: {}", error.what());
      warned = true;
    }
    std::this_thread::sleep_for(milliseconds(config_.heartbeat_interval_ms));
  }
}

ft::Quorum ReplicaGroups::ask_lighthouse(int64_t committed) {
  ft::QuorumMember self;
  self.replica_id = replica_id_;
  self.address = store_address_;
  self.store_address = store_address_;
  self.step = committed;
  self.world_size = static_cast<uint64_t>(group_world_size_);
  self.commit_failures = commit_failures_;
  return lighthouse_->quorum(self, std::chrono::seconds(config_.quorum_timeout_seconds));
}

std::string ReplicaGroups::missing_groups(const ft::QuorumResult& result) const {
  std::set<std::string> present(result.replica_ids.begin(), result.replica_ids.end());
  std::string missing;
  for (int64_t id = 0; id < config_.group_size; ++id) {
    const std::string name = group_name(id);
    if (present.count(name)) continue;
    missing += (missing.empty() ? "" : ", ") + name;
  }
  return missing.empty() ? "none of the configured groups" : missing;
}

const ft::QuorumResult& ReplicaGroups::join(int64_t committed) {
  std::string identity;
  for (;;) {
    ft::Quorum quorum;
    if (group_rank_ == 0) quorum = ask_lighthouse(committed);
    if (group_) {  // the group's other ranks learn it from rank 0
      const std::string text = broadcast_text(*group_, group_rank_ == 0 ? to_json(quorum).dump() : "", 0);
      if (group_rank_ != 0) quorum = quorum_from(nlohmann::json::parse(text));
    }
    result_ = ft::compute_quorum_results(replica_id_, group_rank_, quorum, /*init_sync=*/true);
    identity = comm_identity(quorum);
    if (result_.replica_world_size >= config_.min_replica_size) break;
    // Never train below the minimum: ask again (the Lighthouse answers
    // when the quorum changes, or at once when it does not).
    if (group_rank_ == 0) {
      spdlog::warn("fault tolerance: quorum {} has {} of the {} groups fault_tolerance.min_replica_size asks for; "
                   "waiting for {}",
                   result_.quorum_id, result_.replica_world_size, config_.min_replica_size,
                   missing_groups(result_));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  error_.clear();
  if (identity != comm_identity_ || !replicas_) {
    comm_identity_ = identity;
    rebuild_comm();  // a failure here is the step's: it fails the vote
  }
  return result_;
}

void ReplicaGroups::rebuild_comm() {
  replicas_.reset();
  const auto start = std::chrono::steady_clock::now();
  const std::string& address = result_.store_address;
  const auto colon = address.rfind(':');
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(config_.timeout_seconds);
  const int rank = static_cast<int>(result_.replica_rank), size = static_cast<int>(result_.replica_world_size);
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(address.substr(0, colon), options);
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        "titan_ft/" + std::to_string(result_.quorum_id) + "." + std::to_string(result_.created_ns) + "/" +
            std::to_string(group_rank_),
        tcp);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(config_.timeout_seconds));
    gloo_options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(address_)};
    gloo_options->threads = 2;
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_options);
    auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    replicas_ = internal::make_process_group_comm(group, "dp_replicate_ft", ranks,
                                                  std::chrono::seconds(config_.timeout_seconds),
                                                  "replica groups " + nlohmann::json(result_.replica_ids).dump());
    if (group_rank_ == 0) {
      spdlog::info("fault tolerance: joined the replica groups of quorum {} ({}) in {:.3f} s", result_.quorum_id,
                   c10::Join(", ", result_.replica_ids),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  } catch (const std::exception& error) {
    // A group that left between the quorum and here: the step fails its
    // vote and the next quorum goes without it.
    error_ = std::string("joining the replica groups of quorum ") + std::to_string(result_.quorum_id) + ": " +
             error.what();
    spdlog::warn("fault tolerance: {}", error_);
  }
}

bool ReplicaGroups::transfer_state(TrainState& state) {
  if (!transfers_state()) return false;
  // The same keys in the same order on both sides: the same config.
  try {
    if (result_.heal) {
      const int source = static_cast<int>(*result_.recover_src_replica_rank);
      const auto start = std::chrono::steady_clock::now();
      state.values = nlohmann::json::parse(recv_text(*replicas_, source)).get<std::map<std::string, std::string>>();
      for (auto& [name, tensor] : state.tensors) {
        at::Tensor buffer = at::empty(tensor.sizes(), tensor.options().device(at::kCPU)).contiguous();
        replicas_->recv(buffer, source);
        at::NoGradGuard no_grad;
        tensor.copy_(buffer);
      }
      spdlog::info("fault tolerance: healed from {} at step {} ({} tensors, {:.3f} s)",
                   result_.replica_ids[static_cast<size_t>(source)], state.values.at("step"), state.tensors.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return true;
    }
    const std::string values = nlohmann::json(state.values).dump();
    for (int64_t destination : result_.recover_dst_replica_ranks) {
      const int peer = static_cast<int>(destination);
      send_text(*replicas_, values, peer);
      for (const auto& [name, tensor] : state.tensors) replicas_->send(tensor.detach().cpu().contiguous(), peer);
      spdlog::info("fault tolerance: sent the state of step {} to {}", state.values.at("step"),
                   result_.replica_ids[static_cast<size_t>(destination)]);
    }
  } catch (const std::exception& error) {
    error_ = std::string("moving the state between replica groups: ") + error.what();
    spdlog::warn("fault tolerance: {}", error_);
    if (result_.heal) throw Error("fault tolerance: " + error_ + "; this group cannot heal from its peer");
  }
  return false;
}

void ReplicaGroups::average_gradients(const std::vector<at::Tensor>& gradients) {
  if (!error_.empty()) return;
  if (!replicas_) {  // never committed on this group's gradients alone
    error_ = "no group of the replica groups of quorum " + std::to_string(result_.quorum_id);
    return;
  }
  // One all-reduce a dtype: a few large messages, not one per parameter.
  std::map<c10::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const at::Tensor& g : gradients) {
    if (g.defined()) by_dtype[g.scalar_type()].push_back(g);
  }
  try {
    for (auto& [dtype, grads] : by_dtype) {
      std::vector<at::Tensor> flat;
      for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
      at::Tensor buffer = at::cat(flat);
      replicas_->all_reduce(buffer, ReduceOp::sum);
      buffer.div_(static_cast<double>(result_.replica_world_size));
      int64_t offset = 0;
      for (const at::Tensor& g : grads) {
        g.copy_(buffer.narrow(0, offset, g.numel()).view(g.sizes()));
        offset += g.numel();
      }
    }
  } catch (const std::exception& error) {
    error_ = std::string("averaging gradients over the replica groups ") + nlohmann::json(result_.replica_ids).dump() +
             ": " + error.what();
    spdlog::warn("fault tolerance: {}", error_);
  }
}

void ReplicaGroups::sum(at::Tensor& tensor) {
  if (!error_.empty() || !replicas_) return;  // the step is lost already
  try {
    replicas_->all_reduce(tensor, ReduceOp::sum);
  } catch (const std::exception& error) {
    error_ = std::string("summing over the replica groups ") + nlohmann::json(result_.replica_ids).dump() + ": " +
             error.what();
    spdlog::warn("fault tolerance: {}", error_);
  }
}

double ReplicaGroups::member_mask() const {
  double mask = 0;
  for (const std::string& name : result_.replica_ids) mask += std::ldexp(1.0, static_cast<int>(group_id(name)));
  return mask;
}

bool ReplicaGroups::should_commit() {
  at::Tensor ok = at::tensor({error_.empty() && replicas_ ? int64_t{1} : int64_t{0}}, at::kLong);
  if (group_) group_->all_reduce(ok, ReduceOp::min);
  const bool commit = ok.data_ptr<int64_t>()[0] == 1;  // host memory: no device to wait for
  if (commit) {
    commit_failures_ = 0;
  } else {
    ++commit_failures_;
    replicas_.reset();  // the next quorum (a new id: this failure is reported) meets again
    if (group_rank_ == 0) {
      spdlog::warn("fault tolerance: step discarded ({}); rejoining",
                   error_.empty() ? "a rank of this group failed a collective" : error_);
    }
  }
  return commit;
}

}  // namespace titan
