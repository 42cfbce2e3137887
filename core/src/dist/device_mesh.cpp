// DeviceMesh: ranks laid out row-major over the dims in canonical order
// (pp outermost, tp innermost, as TorchTitan's ParallelDims builds them).
#include "titan/device_mesh.hpp"

#include <numeric>
#include <set>

#include "titan/dist_runtime.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

const std::map<std::string, std::vector<std::string>>& flattened_dims() {
  static const std::map<std::string, std::vector<std::string>> flattened = {
      {"dp", {"dp_replicate", "dp_shard"}},
      {"dp_shard_cp", {"dp_shard", "cp"}},
      {"dp_cp", {"dp_replicate", "dp_shard", "cp"}},
      {"world", {"pp", "dp_replicate", "dp_shard", "cp", "tp"}},
  };
  return flattened;
}

std::string request_text(const std::vector<MeshDimRequest>& requests) {
  std::string text;
  for (const auto& request : requests) {
    text += (text.empty() ? "" : ", ") + request.dim + "=" + std::to_string(request.degree);
  }
  return text.empty() ? "none" : text;
}

}  // namespace

std::vector<std::string> mesh_dims_of(const std::string& name) {
  auto found = flattened_dims().find(name);
  if (found != flattened_dims().end()) return found->second;
  return {name};
}

const std::vector<std::string>& mesh_dim_order() {
  static const std::vector<std::string> order = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
  return order;
}

std::map<std::string, int64_t> resolve_mesh_degrees(const std::vector<MeshDimRequest>& requests, int world_size) {
  std::map<std::string, int64_t> degrees;
  for (const auto& dim : mesh_dim_order()) degrees[dim] = 1;
  std::string rest_dim;
  std::set<std::string> explicit_dims;
  for (const auto& request : requests) {
    if (request.degree > 0) explicit_dims.insert(request.dim);
  }
  for (const auto& request : requests) {
    if (!degrees.count(request.dim)) {
      throw Error("a plugin asked for mesh dim '" + request.dim + "'; known dims: pp, dp_replicate, dp_shard, cp, tp");
    }
    if (request.degree == 0 || request.degree < -1) {
      throw Error("mesh dim " + request.dim + " degree " + std::to_string(request.degree) +
                  " is invalid (use a positive degree, or -1 for the rest of the world)");
    }
    if (request.degree == -1) {
      if (explicit_dims.count(request.dim)) continue;  // another plugin fixed it
      if (!rest_dim.empty() && rest_dim != request.dim) {
        throw Error("both " + rest_dim + " and " + request.dim + " are -1 (the rest of the world); set one explicitly");
      }
      rest_dim = request.dim;
      continue;
    }
    if (degrees[request.dim] != 1 && degrees[request.dim] != request.degree) {
      throw Error("plugins disagree on mesh dim " + request.dim + ": " + std::to_string(degrees[request.dim]) +
                  " vs " + std::to_string(request.degree));
    }
    degrees[request.dim] = request.degree;
  }
  int64_t product = 1;
  for (const auto& [dim, degree] : degrees) product *= degree;
  if (!rest_dim.empty()) {
    if (world_size % product != 0) {
      throw Error("world size " + std::to_string(world_size) + " is not divisible by the fixed degrees (" +
                  request_text(requests) + ", product " + std::to_string(product) + ") so " + rest_dim +
                  "=-1 cannot take the rest; change the degrees or the number of processes");
    }
    degrees[rest_dim] = world_size / product;
  } else if (product != world_size) {
    throw Error("parallel degrees (" + request_text(requests) + ") multiply to " + std::to_string(product) +
                " but the world size is " + std::to_string(world_size) +
                "; make them multiply to the number of processes, or set one to -1");
  }
  return degrees;
}

DeviceMesh::DeviceMesh(DistRuntime& runtime, const std::map<std::string, int64_t>& degrees)
    : world_size_(runtime.world().world_size) {
  const auto& order = mesh_dim_order();
  int64_t product = 1;
  for (const auto& dim : order) {
    auto found = degrees.find(dim);
    degrees_[dim] = found == degrees.end() ? 1 : found->second;
    product *= degrees_[dim];
  }
  if (product != world_size_) {
    throw Error("device mesh " + describe() + " has " + std::to_string(product) + " ranks, the world " +
                std::to_string(world_size_));
  }
  // Coordinates: row-major with tp fastest.
  int64_t rest = runtime.world().rank;
  for (auto dim = order.rbegin(); dim != order.rend(); ++dim) {
    coordinates_[*dim] = rest % degrees_[*dim];
    rest /= degrees_[*dim];
  }
  auto rank_of = [&](const std::map<std::string, int64_t>& coordinates) {
    int64_t rank = 0;
    for (const auto& dim : order) rank = rank * degrees_[dim] + coordinates.at(dim);
    return static_cast<int>(rank);
  };
  // Every rank creates its slice of each dim, in the same order everywhere.
  std::vector<std::string> names = order;
  for (const auto& [flat, parts] : flattened_dims()) names.push_back(flat);
  for (const auto& name : names) {
    if (name == "world") continue;
    std::vector<std::string> members = mesh_dims_of(name);
    std::set<std::string> member_set(members.begin(), members.end());
    std::vector<int> ranks;
    std::map<std::string, int64_t> coordinates = coordinates_;
    int64_t slice_size = 1;
    for (const auto& dim : members) slice_size *= degrees_[dim];
    for (int64_t index = 0; index < slice_size; ++index) {
      int64_t rest_index = index;
      for (auto dim = members.rbegin(); dim != members.rend(); ++dim) {
        coordinates[*dim] = rest_index % degrees_[*dim];
        rest_index /= degrees_[*dim];
      }
      ranks.push_back(rank_of(coordinates));
    }
    // The slice's name: the fixed coordinates of the other dims.
    std::string slice = name;
    for (const auto& dim : order) {
      if (!member_set.count(dim)) slice += "/" + dim + std::to_string(coordinates_[dim]);
    }
    groups_[name] = runtime.new_group(slice, ranks);
    if (members.size() > 1) {
      int64_t coordinate = 0;
      for (const auto& dim : members) coordinate = coordinate * degrees_[dim] + coordinates_[dim];
      degrees_[name] = slice_size;
      coordinates_[name] = coordinate;
    }
  }
  world_ = &runtime.world_group();
}

DeviceMesh::~DeviceMesh() = default;

int64_t DeviceMesh::size(const std::string& dim) const {
  if (dim == "world") return world_size_;
  auto found = degrees_.find(dim);
  return found == degrees_.end() ? 1 : found->second;
}

int64_t DeviceMesh::coordinate(const std::string& dim) const {
  if (dim == "world") return world_->rank();
  auto found = coordinates_.find(dim);
  return found == coordinates_.end() ? 0 : found->second;
}

Comm& DeviceMesh::group(const std::string& dim) const {
  if (dim == "world") return *world_;
  auto found = groups_.find(dim);
  if (found == groups_.end()) throw Error("device mesh has no dim '" + dim + "' (" + describe() + ")");
  return *found->second;
}

std::string DeviceMesh::describe() const {
  std::string text;
  for (const auto& dim : mesh_dim_order()) {
    auto found = degrees_.find(dim);
    int64_t degree = found == degrees_.end() ? 1 : found->second;
    if (degree > 1) text += (text.empty() ? "" : ", ") + dim + "=" + std::to_string(degree);
  }
  return text.empty() ? "1 rank" : text;
}

}  // namespace titan
