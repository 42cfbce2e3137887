// The distributed runtime of one process: the world, the c10d TCPStore
// rendezvous and the process groups made from it.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/world.hpp"

namespace titan {

struct DistTimeouts {
  std::chrono::milliseconds init{std::chrono::seconds(300)};   // rendezvous, group creation
  std::chrono::milliseconds collective{std::chrono::seconds(100)};  // every wait in training
};

// The comm of this rank in the group of `ranks` (global ranks), made
// without a network: `titan plan`'s simulated job hands these in.
using GroupMaker = std::function<std::unique_ptr<Comm>(const std::string& name, const std::vector<int>& ranks)>;

class DistRuntime : public ProcessGroups {
 public:
  // Connects to (rank 0: hosts) the TCPStore at MASTER_ADDR:MASTER_PORT and
  // creates the world group; fails with a clear error after timeouts.init.
  DistRuntime(const World& world, const DistTimeouts& timeouts, const std::string& backend = "gloo");
  // Every group from `simulated` (no store, no network).
  DistRuntime(const World& world, GroupMaker simulated);
  ~DistRuntime() override;

  const World& world() const { return world_; }
  int rank() const override { return world_.rank; }
  int world_size() const override { return world_.world_size; }
  Comm& world_group() override;
  std::unique_ptr<Comm> new_group(const std::string& name, const std::vector<int>& ranks) override;

 private:
  struct Impl;
  World world_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan
