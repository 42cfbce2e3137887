// DeviceMesh: ranks laid out row-major over the dims in canonical order
// (pp outermost, tp innermost, as TorchTitan's ParallelDims builds them).
#include "titan/device_mesh.hpp"

#include <algorithm>
#include <numeric>
#include <set>

#include "titan/error.hpp"

namespace titan {

namespace {

const std::map<std::string, std::vector<std::string>>& flattened_dims() {
  static const std::map<std::string, std::vector<std::string>> flattened = {
      {"dp", {"dp_replicate", "dp_shard"}},
      {"dp_shard_cp", {"dp_shard", "cp"}},
      {"dp_cp", {"dp_replicate", "dp_shard", "cp"}},
      // Expert parallelism borrows its ranks from here (TorchTitan's
      // ep = dp_shard x cp x tp when experts are not tensor-parallel).
      {"dp_shard_cp_tp", {"dp_shard", "cp", "tp"}},
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

std::string describe_degrees(const std::map<std::string, int64_t>& degrees) {
  std::string text;
  for (const auto& dim : mesh_dim_order()) {
    auto found = degrees.find(dim);
    int64_t degree = found == degrees.end() ? 1 : found->second;
    if (degree > 1) text += (text.empty() ? "" : ", ") + dim + "=" + std::to_string(degree);
  }
  return text.empty() ? "1 rank" : text;
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

void check_mesh_splits(const std::vector<MeshSplitRequest>& splits, const std::map<std::string, int64_t>& degrees) {
  std::set<std::string> taken(mesh_dim_order().begin(), mesh_dim_order().end());
  for (const auto& [flat, parts] : flattened_dims()) taken.insert(flat);
  for (const auto& split : splits) {
    const std::string what = "mesh split " + split.inner + " x " + split.outer + " of " + split.span;
    if (!taken.count(split.span) || split.span == "world") {
      throw Error(what + ": '" + split.span + "' is not a dim of the dense mesh (pp, dp_replicate, dp_shard, cp, tp, "
                  "dp, dp_shard_cp, dp_cp, dp_shard_cp_tp)");
    }
    for (const auto& name : {split.inner, split.outer}) {
      if (name.empty() || !taken.insert(name).second) {
        throw Error(what + ": the name '" + name + "' is empty or already a mesh dim; a split names two new dims");
      }
    }
    int64_t span_size = 1;
    bool known = true;
    for (const auto& dim : mesh_dims_of(split.span)) {
      auto found = degrees.find(dim);
      if (found == degrees.end()) known = false;
      else span_size *= found->second;
    }
    if (split.inner_degree < 1 || (known && span_size % split.inner_degree != 0)) {
      throw Error(what + ": " + split.inner + " degree " + std::to_string(split.inner_degree) + " does not divide the " +
                  std::to_string(span_size) + " ranks of " + split.span +
                  "; choose a degree that divides them, or change the data/context-parallel degrees");
    }
  }
}

MeshSlices mesh_slices(const std::map<std::string, int64_t>& requested, const std::vector<MeshSplitRequest>& splits,
                       int rank) {
  const auto& order = mesh_dim_order();
  MeshSlices out;
  int64_t world_size = 1;
  for (const auto& dim : order) {
    auto found = requested.find(dim);
    out.degrees[dim] = found == requested.end() ? 1 : found->second;
    world_size *= out.degrees[dim];
  }
  if (rank < 0 || rank >= world_size) {
    throw Error("rank " + std::to_string(rank) + " is outside the mesh's " + std::to_string(world_size) + " ranks");
  }
  check_mesh_splits(splits, out.degrees);
  // Coordinates: row-major with tp fastest.
  std::map<std::string, int64_t> dense = out.degrees;
  int64_t rest = rank;
  for (auto dim = order.rbegin(); dim != order.rend(); ++dim) {
    out.coordinates[*dim] = rest % dense[*dim];
    rest /= dense[*dim];
  }
  const std::map<std::string, int64_t> mine = out.coordinates;
  auto rank_of = [&](const std::map<std::string, int64_t>& coordinates) {
    int64_t index = 0;
    for (const auto& dim : order) index = index * dense[dim] + coordinates.at(dim);
    return static_cast<int>(index);
  };
  // The ranks whose coordinates equal this rank's on every dim outside
  // `members`, in the order of their flattened index over `members`.
  auto slice_ranks = [&](const std::vector<std::string>& members) {
    int64_t size = 1;
    for (const auto& dim : members) size *= dense[dim];
    std::vector<int> ranks;
    std::map<std::string, int64_t> coordinates = mine;
    for (int64_t index = 0; index < size; ++index) {
      int64_t rest_index = index;
      for (auto dim = members.rbegin(); dim != members.rend(); ++dim) {
        coordinates[*dim] = rest_index % dense[*dim];
        rest_index /= dense[*dim];
      }
      ranks.push_back(rank_of(coordinates));
    }
    return ranks;
  };
  // The slice's label: the group's name and the fixed coordinates of the other dims.
  auto label_of = [&](const std::string& name, const std::vector<std::string>& members, const std::string& extra) {
    std::set<std::string> member_set(members.begin(), members.end());
    std::string label = name;
    for (const auto& dim : order) {
      if (!member_set.count(dim)) label += "/" + dim + std::to_string(mine.at(dim));
    }
    return label + extra;
  };
  // Every rank creates its slice of each dim, in the same order everywhere.
  std::vector<std::string> names = order;
  for (const auto& [flat, parts] : flattened_dims()) {
    if (flat != "world") names.push_back(flat);
  }
  for (const auto& name : names) {
    std::vector<std::string> members = mesh_dims_of(name);
    out.groups.push_back({name, label_of(name, members, ""), slice_ranks(members)});
    if (members.size() > 1) {
      int64_t size = 1, coordinate = 0;
      for (const auto& dim : members) {
        size *= dense[dim];
        coordinate = coordinate * dense[dim] + mine.at(dim);
      }
      out.degrees[name] = size;
      out.coordinates[name] = coordinate;
    }
  }
  // A split regroups its span's slice: position p = outer * inner_degree + inner.
  for (const auto& split : splits) {
    const std::vector<std::string> members = mesh_dims_of(split.span);
    const std::vector<int> span = slice_ranks(members);
    const int64_t inner_degree = split.inner_degree;
    const int64_t outer_degree = static_cast<int64_t>(span.size()) / inner_degree;
    const int64_t position = std::find(span.begin(), span.end(), rank) - span.begin();
    const int64_t inner = position % inner_degree, outer = position / inner_degree;
    std::vector<int> inner_ranks, outer_ranks;
    for (int64_t i = 0; i < inner_degree; ++i) inner_ranks.push_back(span[outer * inner_degree + i]);
    for (int64_t o = 0; o < outer_degree; ++o) outer_ranks.push_back(span[o * inner_degree + inner]);
    out.groups.push_back({split.inner, label_of(split.inner, members, "/" + split.outer + std::to_string(outer)),
                          inner_ranks});
    out.groups.push_back({split.outer, label_of(split.outer, members, "/" + split.inner + std::to_string(inner)),
                          outer_ranks});
    out.degrees[split.inner] = inner_degree;
    out.degrees[split.outer] = outer_degree;
    out.coordinates[split.inner] = inner;
    out.coordinates[split.outer] = outer;
  }
  return out;
}

DeviceMesh::DeviceMesh(ProcessGroups& runtime, const std::map<std::string, int64_t>& degrees,
                       const std::vector<MeshSplitRequest>& splits)
    : world_size_(runtime.world_size()), splits_(splits) {
  int64_t product = 1;
  for (const auto& dim : mesh_dim_order()) {
    auto found = degrees.find(dim);
    product *= found == degrees.end() ? 1 : found->second;
  }
  if (product != world_size_) {
    throw Error("device mesh " + describe_degrees(degrees) + " has " + std::to_string(product) + " ranks, the world " +
                std::to_string(world_size_));
  }
  MeshSlices slices = mesh_slices(degrees, splits, runtime.rank());
  degrees_ = slices.degrees;
  coordinates_ = slices.coordinates;
  for (const auto& group : slices.groups) groups_[group.name] = runtime.new_group(group.label, group.ranks);
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

std::vector<std::string> DeviceMesh::group_names() const {
  std::vector<std::string> names{"world"};
  for (const auto& [name, group] : groups_) names.push_back(name);
  return names;
}

Comm& DeviceMesh::group(const std::string& dim) const {
  if (dim == "world") return *world_;
  auto found = groups_.find(dim);
  if (found == groups_.end()) throw Error("device mesh has no dim '" + dim + "' (" + describe() + ")");
  return *found->second;
}

std::string DeviceMesh::describe() const { return describe_degrees(degrees_); }

}  // namespace titan
