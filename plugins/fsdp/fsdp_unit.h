// An FSDP unit: the parameters gathered and reduced together (one
// transformer block, or the root: embeddings + final norm + output).
// Each parameter's rows are split over dp_shard (FSDP2's dim-0 sharding,
// the last ranks holding fewer rows; experts with fewer rows than ranks on
// dim 1, as TorchTitan); the module's parameter tensor holds
// this rank's fp32 rows between steps and the gathered full tensor (in the
// param dtype) around forward and backward.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "titan/all_gather_extension.hpp"
#include "titan/comm.hpp"
#include "titan/placement.hpp"

namespace titan::fsdp {

struct ShardedParam {
  std::string name;
  at::Tensor param;  // the module's leaf; its data is swapped, never its identity
  std::vector<int64_t> unsharded_shape;  // what dp_shard gathers: global, or this rank's TP piece (2-D)
  int64_t shard_dim = 0;   // the dim split over the ranks (0, or 1 for experts)
  int64_t outer = 1;       // elements of the dims before shard_dim (1 for dim 0)
  RowRange rows;           // this rank's rows of shard_dim
  int64_t chunk_rows = 0;  // rows per rank, with padding
  int64_t row_numel = 1;   // elements per row (of the dims after shard_dim)
  int64_t offset = 0;      // where its chunk sits in the unit's flat per-rank buffer (in buffer elements)
  // What it is gathered as, when its layer says (float8 codes): null = its
  // rows in the param dtype (titan/all_gather_extension.hpp).
  std::shared_ptr<AllGatherExtension> extension;
  int64_t wire_element_size = 0;  // bytes per element on the wire
  at::Tensor shard;        // this rank's rows (the fp32 master copy the optimizer updates)
  at::Tensor full;         // gathered; storage freed while resharded
  at::Tensor grad_shard;   // reduced gradient, summed over microbatches
  // Unreduced gradients of the step's earlier microbatches in the reduce
  // dtype, when it is wider than the param dtype (hold_gradients()).
  at::Tensor held_grad;
};

struct UnitGroups {
  Comm* shard = nullptr;      // dp_shard (efsdp for parameters sharded over ep)
  Comm* replicate = nullptr;  // dp_replicate (HSDP), null when of size 1
  // Data-parallel ranks whose gradients are already summed into this rank's
  // before the reduction (experts: the all-to-all's backward summed the ep
  // ranks' tokens; below 1 where ep borrows tp ranks that split one rank's
  // tokens), so the mean over data-parallel ranks divides by this much more
  // (TorchTitan's gradient_divide_factor).
  double presummed = 1;
};

class Unit {
 public:
  Unit(std::string label, std::vector<ShardedParam> params, UnitGroups groups, c10::ScalarType param_dtype,
       c10::ScalarType reduce_dtype);

  const std::string& label() const { return label_; }
  bool sharded() const { return state_ == State::sharded; }
  // Starts the unit's all-gather (one collective) without waiting, so it
  // overlaps the compute of the block before it (FSDP2's prefetch).
  void prefetch();
  // Finishes (or starts and finishes) the all-gather and points the
  // module's tensors at the gathered parameters; refills freed storage
  // before backward.
  void unshard();
  // Frees the gathered storage after forward; autograd's saved views keep
  // the storage object and see it refilled by the next unshard().
  void free_unsharded();
  // After the unit's backward: reduce-scatters the gradients (all-reduces
  // them over replicas for HSDP), adds them to grad_shard, reshards.
  void reduce_gradients();
  // After a backward whose reduction waits for the step's last one (under a
  // pipeline schedule): stays gathered, and keeps the gradient unreduced,
  // summed in the reduce dtype where the param dtype is narrower.
  void hold_gradients();
  // Back to the shards without touching gradients (forward without grad).
  void reshard();
  // param.grad = the reduced shard gradient (zeros if none arrived).
  void install_gradients();

 private:
  // Where the flat gather / reduce buffers live: on the parameters' device
  // (the CPU, a GPU, or meta in a dry run: shapes, no bytes).
  c10::Device buffer_device() const {
    return params_.empty() ? c10::Device(c10::kCPU) : params_.front().param.device();
  }
  enum class State { sharded, unsharded, freed };
  void point_at_shards();
  void settle();  // completes a prefetch nobody consumed
  // by_rank [ranks, flat]: this rank's gradients, row r packing rank r's
  // rows; returns this rank's rows averaged over dp_shard (the
  // reduce-scatter, in fsdp_gradient_reduce.cpp).
  at::Tensor reduce_scatter_gradients(const at::Tensor& by_rank);


  std::string label_;
  std::vector<ShardedParam> params_;
  UnitGroups groups_;
  c10::ScalarType param_dtype_, reduce_dtype_;
  c10::ScalarType buffer_dtype_;  // param dtype, or bytes when some parameter is gathered its own way
  int64_t flat_numel_ = 0;  // per rank, padded, in buffer elements
  State state_ = State::sharded;
  std::unique_ptr<CommWork> pending_;  // the prefetch in flight
  at::Tensor gathered_, local_;        // its buffers, alive until it ends
};

}  // namespace titan::fsdp
