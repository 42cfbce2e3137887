// The distributed runtime of one process: the world, the c10d TCPStore
// rendezvous and the process groups made from it.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/world.hpp"

namespace titan {

struct DistTimeouts {
  std::chrono::milliseconds init{std::chrono::seconds(300)};   // rendezvous, group creation
  std::chrono::milliseconds collective{std::chrono::seconds(100)};  // every wait in training
};

class DistRuntime {
 public:
  // Connects to (rank 0: hosts) the TCPStore at MASTER_ADDR:MASTER_PORT and
  // creates the world group; fails with a clear error after timeouts.init.
  DistRuntime(const World& world, const DistTimeouts& timeouts, const std::string& backend = "gloo");
  ~DistRuntime();

  const World& world() const { return world_; }
  Comm& world_group();
  // A group of the given global ranks; collective over those ranks only
  // (non-members must not call it). `name` must be unique per group.
  std::unique_ptr<Comm> new_group(const std::string& name, const std::vector<int>& ranks);

 private:
  struct Impl;
  World world_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan
