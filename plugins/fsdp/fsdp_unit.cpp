// Unit: gather, free, refill and reduce-scatter through one flat buffer per
// rank ([chunk_0 rows | chunk_1 rows | ...], padded), so each unit costs one
// collective each way.
#include "fsdp_unit.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>


#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan::fsdp {

namespace {

// `tensor`'s memory as bytes of `shape`, through a tensor of its own: a
// copy into it leaves `tensor`'s version counter alone, which autograd
// checks on the tensors it saved in forward (the gathered parameters are
// refilled in place under them). On any device.
at::Tensor byte_alias(const at::Tensor& tensor, at::IntArrayRef shape) {
  return at::from_blob(tensor.data_ptr(), shape, at::TensorOptions().dtype(at::kByte).device(tensor.device()));
}

// A contiguous tensor's bytes, flat.
at::Tensor flat_bytes(const at::Tensor& tensor) {
  return byte_alias(tensor, {static_cast<int64_t>(tensor.numel() * tensor.element_size())});
}

}  // namespace

Unit::Unit(std::string label, std::vector<ShardedParam> params, UnitGroups groups, c10::ScalarType param_dtype,
           c10::ScalarType reduce_dtype)
    : label_(std::move(label)), params_(std::move(params)), groups_(groups), param_dtype_(param_dtype),
      reduce_dtype_(reduce_dtype), buffer_dtype_(param_dtype) {
  // A parameter gathered as something else (float8 codes) makes the
  // unit's buffer raw bytes, so one collective still moves the whole unit.
  for (const auto& p : params_) {
    if (p.extension) buffer_dtype_ = c10::kByte;
  }
  const int64_t buffer_element = static_cast<int64_t>(c10::elementSize(buffer_dtype_));
  for (auto& p : params_) {
    p.wire_element_size = static_cast<int64_t>(c10::elementSize(p.extension ? p.extension->wire_dtype() : param_dtype_));
    p.offset = flat_numel_;
    flat_numel_ += (p.outer * p.chunk_rows * p.row_numel * p.wire_element_size + buffer_element - 1) / buffer_element;
  }
}

void Unit::prefetch() {
  if (state_ == State::unsharded || pending_) return;
  CallSite site("fsdp all_gather " + label_);
  const int64_t ranks = groups_.shard->size();
  at::NoGradGuard no_grad;
  // A dry run's shards are meta tensors: the same buffers and collectives,
  // no bytes to move.
  const bool meta = buffer_device().is_meta();
  local_ = at::zeros({flat_numel_}, at::TensorOptions().dtype(buffer_dtype_).device(buffer_device()));
  const at::Tensor local_bytes = meta ? at::Tensor() : flat_bytes(local_);
  for (auto& p : params_) {
    if (state_ == State::sharded) {
      if (!p.shard.defined()) p.shard = p.param.data();  // the materialized, initialized rows
      p.param.mutable_grad().reset();  // the optimizer's view of the last step's gradient
    }
    int64_t count = p.outer * p.rows.length * p.row_numel;
    // Every rank asks the extension, even with no rows: it may run a collective.
    at::Tensor wire = p.extension ? p.extension->pre_all_gather(p.shard, *groups_.shard) : p.shard.to(param_dtype_);
    wire = wire.contiguous();
    if (wire.numel() != count || static_cast<int64_t>(wire.element_size()) != p.wire_element_size) {
      throw Error("fsdp: the all-gather extension of '" + p.name + "' returned " + std::to_string(wire.numel()) +
                  " elements of " + std::to_string(wire.element_size()) + " bytes for " + std::to_string(count) +
                  " of " + std::to_string(p.wire_element_size));
    }
    if (count > 0 && !meta) {
      local_bytes.narrow(0, p.offset * local_.element_size(), count * p.wire_element_size).copy_(flat_bytes(wire));
    }
  }
  gathered_ = at::empty({ranks * flat_numel_}, local_.options());
  pending_ = groups_.shard->all_gather_into_async(gathered_, local_);
}

void Unit::unshard() {
  if (state_ == State::unsharded) return;
  prefetch();
  pending_->wait();
  pending_.reset();
  at::Tensor gathered = gathered_;
  gathered_ = at::Tensor();
  local_ = at::Tensor();
  const int64_t ranks = groups_.shard->size();
  const bool first = state_ == State::sharded;
  at::NoGradGuard no_grad;
  const int64_t buffer_element = static_cast<int64_t>(gathered.element_size());
  const size_t element = c10::elementSize(param_dtype_);
  for (auto& p : params_) {
    if (!p.full.defined()) {
      p.full = at::empty(p.unsharded_shape, p.shard.options().dtype(param_dtype_));
    } else if (state_ == State::freed || p.full.storage().nbytes() == 0) {
      compat::resize_storage_bytes(p.full, p.full.numel() * element);
    }
    // Each rank's rows of the wire elements, into the whole parameter.
    at::Tensor wire_full = p.extension ? at::empty(p.unsharded_shape, p.full.options().dtype(p.extension->wire_dtype()))
                                       : p.full;
    // Each rank's rows, for every outer index at once: [outer, rows] of
    // bytes, copied through an alias (byte_alias: no version bump).
    const int64_t row_bytes = p.row_numel * p.wire_element_size;
    const int64_t dim_rows = p.unsharded_shape[p.shard_dim];
    if (!gathered.is_meta() && wire_full.numel() > 0) {
      const at::Tensor destination = byte_alias(wire_full, {p.outer, dim_rows * row_bytes});
      const at::Tensor source = flat_bytes(gathered);
      for (int64_t rank = 0; rank < ranks; ++rank) {
        RowRange rows = even_row_shard(dim_rows, ranks, rank);
        if (rows.length == 0) continue;
        const int64_t piece = rows.length * row_bytes;  // bytes of one outer index
        destination.narrow(1, rows.begin * row_bytes, piece)
            .copy_(source.narrow(0, (rank * flat_numel_ + p.offset) * buffer_element, p.outer * piece)
                       .view({p.outer, piece}));
      }
    }
    if (p.extension) {
      // The layer keeps what it computes with (e.g. the codes and their
      // scale); the parameter holds the values they stand for.
      at::Tensor values = p.extension->post_all_gather(wire_full, param_dtype_).contiguous();
      if (values.sizes() != p.full.sizes() || values.scalar_type() != param_dtype_) {
        throw Error("fsdp: the all-gather extension of '" + p.name + "' rebuilt " + c10::str(values.sizes()) + " " +
                    c10::toString(values.scalar_type()) + ", expected " + c10::str(p.full.sizes()) + " " +
                    c10::toString(param_dtype_));
      }
      if (!values.is_meta() && values.numel() > 0) flat_bytes(p.full).copy_(flat_bytes(values));
    }
    if (first) p.param.set_data(p.full);
  }
  state_ = State::unsharded;
}

void Unit::settle() {
  if (pending_) unshard();
}

void Unit::free_unsharded() {
  if (state_ != State::unsharded) return;
  for (auto& p : params_) compat::resize_storage_bytes(p.full, 0);
  state_ = State::freed;
}

void Unit::point_at_shards() {
  for (auto& p : params_) {
    p.param.set_data(p.shard);
    compat::resize_storage_bytes(p.full, 0);
  }
  state_ = State::sharded;
}

void Unit::reshard() {
  settle();
  if (state_ == State::sharded) return;
  for (auto& p : params_) p.param.mutable_grad().reset();
  point_at_shards();
}

void Unit::reduce_gradients() {
  settle();
  if (state_ == State::sharded) return;
  CallSite site("fsdp reduce_scatter " + label_);
  at::NoGradGuard no_grad;
  const int64_t ranks = groups_.shard->size();
  // [rank][flat]: rank r's rows of every parameter's gradient, padded.
  at::Tensor flat = at::zeros({ranks, flat_numel_}, at::TensorOptions().dtype(reduce_dtype_).device(buffer_device()));
  for (auto& p : params_) {
    at::Tensor grad = p.param.grad();
    if (p.held_grad.defined()) {
      grad = grad.defined() ? p.held_grad.add_(grad) : p.held_grad;
      p.held_grad = at::Tensor();
    }
    if (!grad.defined()) continue;  // unused in this step: contributes zeros
    const int64_t dim_rows = p.unsharded_shape[p.shard_dim];
    at::Tensor rows_view = grad.reshape({p.outer, dim_rows, p.row_numel});
    for (int64_t rank = 0; rank < ranks; ++rank) {
      RowRange rows = even_row_shard(dim_rows, ranks, rank);
      if (rows.length == 0) continue;
      flat[rank].narrow(0, p.offset, p.outer * rows.length * p.row_numel)
          .copy_(rows_view.narrow(1, rows.begin, rows.length).reshape({-1}));
    }
    p.param.mutable_grad().reset();  // free the full gradient now
  }
  at::Tensor mine = reduce_scatter_gradients(flat);
  if (groups_.replicate) {
    CallSite replicas("fsdp all_reduce " + label_ + " over replicas");
    groups_.replicate->all_reduce(mine, ReduceOp::avg);
  }
  if (groups_.presummed != 1) mine.div_(groups_.presummed);
  for (auto& p : params_) {
    int64_t count = p.outer * p.rows.length * p.row_numel;
    at::Tensor piece = mine.narrow(0, p.offset, count).view(p.shard.sizes()).to(p.shard.scalar_type());
    if (p.grad_shard.defined()) {
      p.grad_shard.add_(piece);
    } else {
      p.grad_shard = piece.clone();
    }
  }
  point_at_shards();
}

void Unit::hold_gradients() {
  if (param_dtype_ == reduce_dtype_) return;  // autograd sums into .grad at full precision already
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    const at::Tensor grad = p.param.grad();
    if (!grad.defined()) continue;
    if (p.held_grad.defined()) {
      p.held_grad.add_(grad);
    } else {
      p.held_grad = grad.to(reduce_dtype_);
    }
    p.param.mutable_grad().reset();
  }
}

void Unit::install_gradients() {
  if (state_ != State::sharded) {
    throw Error("fsdp: unit " + label_ + " is still unsharded when the optimizer step begins");
  }
  for (auto& p : params_) {
    p.param.mutable_grad() = p.grad_shard.defined() ? p.grad_shard : at::zeros_like(p.shard);
    p.grad_shard = at::Tensor();
  }
}

}  // namespace titan::fsdp
