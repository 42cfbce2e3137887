// DeviceMesh: the world as a named n-D grid (pp, dp_replicate, dp_shard,
// cp, tp; outer to inner, as TorchTitan orders them), with one Comm per
// slice of each dim and of the flattened dims dp (dp_replicate x dp_shard),
// dp_shard_cp, dp_cp, dp_shard_cp_tp and "world"; plus the dims plugins
// declare by splitting one of those (MeshSplitRequest: expert parallelism's
// ep and efsdp over dp_shard_cp_tp, a sparse mesh beside the dense one).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/parallelizer.hpp"

namespace titan {

// Where a mesh gets its process groups: the trainer's distributed runtime,
// or the dry run's simulated job.
class ProcessGroups {
 public:
  virtual ~ProcessGroups() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Comm& world_group() = 0;
  // A group of the given global ranks; collective over those ranks only
  // (non-members must not call it). `name` must be unique per group.
  virtual std::unique_ptr<Comm> new_group(const std::string& name, const std::vector<int>& ranks) = 0;
};

// The canonical dim order; degrees of dims nobody asked for are 1.
const std::vector<std::string>& mesh_dim_order();
// The canonical dims a mesh dim name stands for: {"dp_replicate",
// "dp_shard"} for "dp", all of them for "world", {name} for a plain dim.
std::vector<std::string> mesh_dims_of(const std::string& name);

// Degrees per dim from the plugins' requests: at most one -1 ("the rest of
// the world"); the product must equal the world size. Errors name the
// plugins' requests and the world size.
std::map<std::string, int64_t> resolve_mesh_degrees(const std::vector<MeshDimRequest>& requests, int world_size);

// Throws naming the split when its span is not a dense dim, a name is taken
// or its inner degree does not divide the span (spans of unknown degree pass).
void check_mesh_splits(const std::vector<MeshSplitRequest>& splits, const std::map<std::string, int64_t>& degrees);

// The groups one rank belongs to, worked out without processes: every dim's,
// flattened name's and split dim's degree and this rank's coordinate along
// it, and the ranks of each of its groups (in the order all ranks create them).
struct MeshSlices {
  struct Group {
    std::string name;   // "dp_shard", "ep", ...
    std::string label;  // the slice: "dp_shard/pp0/dp_replicate1/cp0/tp0"
    std::vector<int> ranks;
  };
  std::map<std::string, int64_t> degrees;
  std::map<std::string, int64_t> coordinates;
  std::vector<Group> groups;
};
MeshSlices mesh_slices(const std::map<std::string, int64_t>& degrees, const std::vector<MeshSplitRequest>& splits,
                       int rank);

class DeviceMesh {
 public:
  // Collective over all ranks: every rank creates the groups it belongs to.
  DeviceMesh(ProcessGroups& runtime, const std::map<std::string, int64_t>& degrees,
             const std::vector<MeshSplitRequest>& splits = {});
  ~DeviceMesh();

  int64_t size(const std::string& dim) const;        // 1 for an absent dim; flattened names too
  int64_t coordinate(const std::string& dim) const;  // this rank's index along dim
  // The group of this rank's slice along `dim` (or a flattened name).
  Comm& group(const std::string& dim) const;
  // Every name group() takes ("world" first, then the dims, flattened names
  // and split dims this mesh built), in the same order on every rank.
  std::vector<std::string> group_names() const;
  int world_size() const { return world_size_; }
  std::string describe() const;  // "dp_shard=4, tp=2"
  // The plugins' splits this mesh was built with (ep x efsdp): a parameter
  // sharded over a split's inner dim is data-parallel over its outer dim.
  const std::vector<MeshSplitRequest>& splits() const { return splits_; }

 private:
  int world_size_ = 1;
  std::vector<MeshSplitRequest> splits_;
  std::map<std::string, int64_t> degrees_;
  std::map<std::string, int64_t> coordinates_;
  std::map<std::string, std::unique_ptr<Comm>> groups_;
  Comm* world_ = nullptr;
};

}  // namespace titan
