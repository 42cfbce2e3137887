// TensorLayout helpers: descriptions, FSDP's row split, gather and slice.
#include "titan/placement.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "titan/device_mesh.hpp"
#include "titan/error.hpp"

namespace titan {

std::string Placement::str() const {
  switch (kind) {
    case Kind::replicate: return "R";
    case Kind::shard: return "S(" + std::to_string(dim) + ")";
    case Kind::partial: return "P";
  }
  return "?";
}

TensorLayout TensorLayout::replicated(const std::vector<int64_t>& shape) {
  TensorLayout layout;
  layout.global_shape = shape;
  layout.local_shape = shape;
  layout.local_offset.assign(shape.size(), 0);
  return layout;
}

bool TensorLayout::is_sharded() const {
  for (const auto& placement : placements) {
    if (placement.kind == Placement::Kind::shard) return true;
  }
  return false;
}

int64_t TensorLayout::local_numel() const {
  int64_t numel = 1;
  for (int64_t extent : local_shape) numel *= extent;
  return numel;
}

bool TensorLayout::splits(const std::string& canonical_dim) const {
  for (size_t i = 0; i < mesh_dims.size(); ++i) {
    if (placements[i].kind == Placement::Kind::replicate) continue;
    for (const auto& part : mesh_dims_of(mesh_dims[i])) {
      if (part == canonical_dim) return true;
    }
  }
  return false;
}

// Pipeline stages are disjoint: a parameter lives on one pp rank, so pp
// never counts as a copy (the pipeline trainer gives every parameter a layout).
// A mesh split (ep x efsdp over dp_shard_cp) regroups its span's ranks: a
// layout that splits one of its dims is counted over the split dims instead
// of the span's (experts sharded over ep are copied over efsdp only).
// A layout that names pp is a parameter the pipeline's first and last stages
// both hold (tied embeddings): two copies over pp, whatever its size, and the
// first stage's (pp rank 0) is the one written.
namespace {
bool shared_by_pipeline_ends(const TensorLayout& layout, const DeviceMesh& mesh) {
  const auto& dims = layout.mesh_dims;
  return mesh.size("pp") > 1 && std::find(dims.begin(), dims.end(), "pp") != dims.end();
}
}  // namespace

int64_t TensorLayout::replication(const DeviceMesh& mesh) const {
  int64_t copies = shared_by_pipeline_ends(*this, mesh) ? 2 : 1;
  for (const auto& dim : unsplit_dims(mesh)) copies *= mesh.size(dim);
  return copies;
}

bool TensorLayout::is_first_copy(const DeviceMesh& mesh) const {
  if (shared_by_pipeline_ends(*this, mesh) && mesh.coordinate("pp") != 0) return false;
  for (const auto& dim : unsplit_dims(mesh)) {
    if (mesh.coordinate(dim) != 0) return false;
  }
  return true;
}

std::vector<std::string> TensorLayout::unsplit_dims(const DeviceMesh& mesh) const {
  std::vector<std::string> dims;
  std::set<std::string> regrouped;  // canonical dims a split stands for here
  for (const auto& split : mesh.splits()) {
    const bool inner = splits(split.inner), outer = splits(split.outer);
    if (!inner && !outer) continue;
    for (const auto& dim : mesh_dims_of(split.span)) regrouped.insert(dim);
    if (!inner) dims.push_back(split.inner);
    if (!outer) dims.push_back(split.outer);
  }
  for (const auto& dim : mesh_dim_order()) {
    if (dim != "pp" && !regrouped.count(dim) && !splits(dim)) dims.push_back(dim);
  }
  return dims;
}

std::string TensorLayout::describe() const {
  std::ostringstream out;
  out << c10::IntArrayRef(global_shape);
  for (size_t i = 0; i < mesh_dims.size(); ++i) out << " " << placements[i].str() << " over " << mesh_dims[i];
  out << ", local " << c10::IntArrayRef(local_shape) << " at " << c10::IntArrayRef(local_offset);
  return out.str();
}

RowRange even_row_shard(int64_t rows, int64_t ranks, int64_t rank) {
  int64_t chunk = (rows + ranks - 1) / ranks;
  int64_t begin = std::min(rows, rank * chunk);
  int64_t end = std::min(rows, begin + chunk);
  return {begin, end - begin};
}

at::Tensor local_piece(const at::Tensor& full, const TensorLayout& layout) {
  if (full.sizes() != c10::IntArrayRef(layout.global_shape)) {
    throw Error("local_piece: tensor " + c10::str(full.sizes()) + " is not the layout's global shape " +
                layout.describe());
  }
  at::Tensor piece = full;
  for (size_t dim = 0; dim < layout.local_shape.size(); ++dim) {
    piece = piece.narrow(static_cast<int64_t>(dim), layout.local_offset[dim], layout.local_shape[dim]);
  }
  return piece;
}

at::Tensor full_tensor(const at::Tensor& local, const TensorLayout& layout, const DeviceMesh& mesh) {
  // Every rank writes its box into a zero tensor of the global shape; one
  // all-reduce over the dims that split or partially sum the tensor
  // assembles it. Replicated dims already agree and are left out.
  at::Tensor full = at::zeros(layout.global_shape, local.options());
  bool needs_reduce = false;
  for (size_t i = 0; i < layout.mesh_dims.size(); ++i) {
    const Placement& placement = layout.placements[i];
    if (placement.kind == Placement::Kind::replicate || mesh.size(layout.mesh_dims[i]) == 1) continue;
    needs_reduce = true;
  }
  local_piece(full, layout).copy_(local);
  if (!needs_reduce) return full;
  for (size_t i = 0; i < layout.mesh_dims.size(); ++i) {
    if (layout.placements[i].kind == Placement::Kind::replicate) continue;
    mesh.group(layout.mesh_dims[i]).all_reduce(full, ReduceOp::sum);
  }
  return full;
}

at::Tensor redistribute(const at::Tensor& local, const TensorLayout& from, const TensorLayout& to,
                        const DeviceMesh& mesh) {
  if (from.global_shape != to.global_shape) {
    throw Error("redistribute: layouts of different global shapes (" + from.describe() + " vs " + to.describe() + ")");
  }
  return local_piece(full_tensor(local, from, mesh), to).clone();
}

}  // namespace titan
