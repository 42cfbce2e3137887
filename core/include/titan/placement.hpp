// Sharding metadata (a DTensor-lite): how a local tensor relates to its
// global tensor over the mesh. FSDP, DDP, TP, checkpoints, gradient
// clipping and the conformance harness all read the same layouts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace titan {

class DeviceMesh;

struct Placement {
  enum class Kind { replicate, shard, partial };
  Kind kind = Kind::replicate;
  int64_t dim = 0;  // for shard

  static Placement replicate() { return {Kind::replicate, 0}; }
  static Placement shard(int64_t dim) { return {Kind::shard, dim}; }
  static Placement partial() { return {Kind::partial, 0}; }
  std::string str() const;  // "R", "S(0)", "P"
  bool operator==(const Placement& other) const { return kind == other.kind && dim == other.dim; }
};

// One tensor's layout: its global shape, the box this rank holds
// (offset and extent per dim; the local tensor has `local_shape`), and the
// placement along each mesh dim it is distributed over.
struct TensorLayout {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> local_offset;
  std::vector<int64_t> local_shape;
  std::vector<std::string> mesh_dims;   // e.g. {"dp_replicate", "dp_shard"}
  std::vector<Placement> placements;    // one per mesh dim

  // A tensor held whole by every rank.
  static TensorLayout replicated(const std::vector<int64_t>& shape);
  bool is_sharded() const;
  int64_t local_numel() const;
  // How many ranks hold each element: the product of the sizes of every
  // mesh dim (mentioned or not) that no shard or partial placement splits,
  // but pp: a pipeline stage's parameters live on one pp rank only. A
  // layout over a split dim (ep) counts the split's other dim (efsdp) in
  // place of the span's dims (dp_shard, cp). A layout that names pp
  // (replicate) is held by the pipeline's first and last stages alike (tied
  // embeddings): two copies over pp, the first stage's written.
  int64_t replication(const DeviceMesh& mesh) const;
  // Whether this rank holds the first of those copies (coordinate 0 along
  // every such dim): the one rank that writes the piece to a checkpoint.
  bool is_first_copy(const DeviceMesh& mesh) const;
  std::string describe() const;  // "[256, 64] S(0) over dp_shard, local [64, 64] at [128, 0]"

 private:
  bool splits(const std::string& canonical_dim) const;  // by a shard or partial placement
  std::vector<std::string> unsplit_dims(const DeviceMesh& mesh) const;  // the dims that hold copies
};

// FSDP's dim-0 split: rank r of n holds rows [r * c, min((r + 1) * c, rows))
// with c = ceil(rows / n); trailing ranks may hold fewer rows, or none.
struct RowRange {
  int64_t begin = 0;
  int64_t length = 0;
};
RowRange even_row_shard(int64_t rows, int64_t ranks, int64_t rank);

// The full tensor from this rank's local piece: all-gathers along the
// shard dims (Partial is summed). Collective over the mesh dims involved.
at::Tensor full_tensor(const at::Tensor& local, const TensorLayout& layout, const DeviceMesh& mesh);

// This rank's piece of a full tensor under `layout` (no communication).
at::Tensor local_piece(const at::Tensor& full, const TensorLayout& layout);

// This rank's piece under `to` of the tensor held as `local` under `from`
// (same global shape). Collective over `from`'s non-replicated mesh dims.
// Gathers the whole tensor on every rank on the way: simple and exact, meant
// for checkpoints and checks, not for the training step.
at::Tensor redistribute(const at::Tensor& local, const TensorLayout& from, const TensorLayout& to,
                        const DeviceMesh& mesh);

}  // namespace titan
