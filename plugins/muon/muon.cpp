// Muon's update on ATen ops. The momentum and the Nesterov blend are
// elementwise, so each rank keeps them for its own piece; only the
// orthogonalization needs the whole matrix.
#include "muon.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/placement.hpp"

namespace titan::muon {

namespace {

bool goes_to_adamw(const NamedParameter& param, const MuonOptions& options) {
  if (param.tensor.dim() != 2) return true;
  return std::any_of(options.adamw_params.begin(), options.adamw_params.end(),
                     [&](const std::string& part) { return param.name.find(part) != std::string::npos; });
}

std::vector<int64_t> global_shape(const NamedParameter& param) {
  return param.layout ? param.layout->global_shape : param.tensor.sizes().vec();
}

double lr_ratio(const std::vector<int64_t>& shape, MuonOptions::AdjustLr adjust) {
  const double rows = static_cast<double>(shape[0]), cols = static_cast<double>(shape[1]);
  switch (adjust) {
    case MuonOptions::AdjustLr::original: return std::sqrt(std::max(1.0, rows / cols));
    case MuonOptions::AdjustLr::match_rms_adamw: return 0.2 * std::sqrt(std::max(rows, cols));
    case MuonOptions::AdjustLr::none: return 1.0;
  }
  return 1.0;
}

// The mesh dims over which the ranks holding pieces (or copies) of the
// matrix share its orthogonalization: its layout's, but pp (a parameter on
// two pipeline stages is updated by each) and those of size 1.
std::vector<std::string> sharing_dims(const NamedParameter& param) {
  std::vector<std::string> dims;
  if (!param.layout || !param.mesh) return dims;
  for (const auto& dim : param.layout->mesh_dims) {
    if (dim != "pp" && param.mesh->size(dim) > 1) dims.push_back(dim);
  }
  return dims;
}

// The whole matrix from this rank's piece. One shard placement (FSDP's rows,
// TP's rows or columns), pieces in rank order of one padded extent: one
// all-gather of the pieces. Otherwise (sharded over two dims) full_tensor:
// an all-reduce of the piece in a zero matrix per shard dim, exact for any
// layout and about twice the bytes.
at::Tensor gather_whole(const at::Tensor& local, const TensorLayout& layout, const DeviceMesh& mesh) {
  int splits = 0;  // mesh dims of size > 1 that shard (or partially sum) the matrix
  bool partial = false;
  size_t shard = 0;
  for (size_t i = 0; i < layout.mesh_dims.size(); ++i) {
    if (layout.placements[i].kind == Placement::Kind::replicate || mesh.size(layout.mesh_dims[i]) == 1) continue;
    ++splits;
    shard = i;
    partial = partial || layout.placements[i].kind == Placement::Kind::partial;
  }
  if (splits == 0) return local;
  if (splits == 1 && !partial) {
    const std::string& dim = layout.mesh_dims[shard];
    const int64_t d = layout.placements[shard].dim, ranks = mesh.size(dim);
    const int64_t chunk = (layout.global_shape[d] + ranks - 1) / ranks;
    if (layout.local_offset[d] == mesh.coordinate(dim) * chunk && local.size(d) <= chunk) {
      at::Tensor piece = local.movedim(d, 0);
      if (piece.size(0) < chunk) {
        std::vector<int64_t> pad_shape = piece.sizes().vec();
        pad_shape[0] = chunk - piece.size(0);
        piece = at::cat({piece, at::zeros(pad_shape, piece.options())});
      }
      std::vector<int64_t> gathered_shape = piece.sizes().vec();
      gathered_shape[0] = chunk * ranks;
      at::Tensor gathered = at::empty(gathered_shape, piece.options());
      mesh.group(dim).all_gather_into(gathered, piece.contiguous());
      return gathered.narrow(0, 0, layout.global_shape[d]).movedim(0, d);
    }
  }
  return full_tensor(local, layout, mesh);
}

}  // namespace

at::Tensor orthogonalize(const at::Tensor& g, const MuonOptions& options) {
  const auto [a, b, c] = options.ns_coefficients;
  const bool tall = g.size(0) > g.size(1);
  at::Tensor x = g.to(options.ns_dtype);
  if (tall) x = x.t();
  x = x / x.norm().clamp_min(options.eps);
  for (int64_t i = 0; i < options.ns_steps; ++i) {
    at::Tensor gram = at::matmul(x, x.t());
    at::Tensor polynomial = at::addmm(gram, gram, gram, b, c);  // b * A + c * A @ A
    x = at::addmm(x, polynomial, x, a, 1);                       // a * X + (b A + c A^2) X
  }
  return tall ? x.t() : x;
}

Muon::Muon(const std::vector<NamedParameter>& params, const MuonOptions& options) : options_(options) {
  at::NoGradGuard no_grad;
  std::set<std::string> names;
  for (const auto& param : params) {
    if (!param.tensor.defined()) throw Error("muon: parameter '" + param.name + "' is an undefined tensor");
    if (!names.insert(param.name).second) throw Error("muon: parameter name '" + param.name + "' appears twice");
    if (param.tensor.is_sparse() || param.tensor.is_complex()) {
      throw Error("muon: parameter '" + param.name + "' is sparse or complex (unsupported)");
    }
    if (goes_to_adamw(param, options_)) {
      AdamWState state{param, at::zeros_like(param.tensor, at::MemoryFormat::Preserve),
                       at::zeros_like(param.tensor, at::MemoryFormat::Preserve),
                       at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(at::kCPU))};
      others_.push_back(std::move(state));
    } else {
      MatrixState state{param, at::zeros_like(param.tensor, at::MemoryFormat::Preserve),
                        static_cast<int64_t>(matrices_.size())};
      matrices_.push_back(std::move(state));
    }
  }
}

at::Tensor Muon::orthogonalized_piece(const MatrixState& state, const at::Tensor& update) const {
  const NamedParameter& param = state.param;
  const std::vector<std::string> dims = sharing_dims(param);
  if (dims.empty()) return orthogonalize(update, options_);
  CallSite site("muon orthogonalize " + param.name);
  // Every rank of the group gets the whole update (an all-gather over the
  // shard dims; a replicated matrix is whole already) ...
  at::Tensor whole = gather_whole(update, *param.layout, *param.mesh);
  // ... one of them, round-robin over the matrices, orthogonalizes it ...
  std::vector<int64_t> owner(dims.size());
  int64_t rest = state.index;
  bool is_owner = true;
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t size = param.mesh->size(dims[i]);
    owner[i] = rest % size;
    rest /= size;
    is_owner = is_owner && param.mesh->coordinate(dims[i]) == owner[i];
  }
  at::Tensor result = is_owner ? orthogonalize(whole, options_).contiguous()
                               : at::empty(whole.sizes(), whole.options().dtype(options_.ns_dtype));
  // ... and broadcasts it, one dim at a time: after dim i, every rank whose
  // coordinates along the later dims are the owner's holds it.
  for (size_t i = 0; i < dims.size(); ++i) {
    param.mesh->group(dims[i]).broadcast(result, static_cast<int>(owner[i]));
  }
  return local_piece(result, *param.layout);
}

void Muon::step_matrix(MatrixState& state, double lr) {
  at::Tensor& p = state.param.tensor;
  const at::Tensor& grad = p.grad();
  state.momentum_buffer.lerp_(grad, 1 - options_.momentum);
  at::Tensor update = options_.nesterov ? grad.lerp(state.momentum_buffer, options_.momentum) : state.momentum_buffer;
  at::Tensor orthogonal = orthogonalized_piece(state, update);
  if (options_.weight_decay != 0) p.mul_(1 - lr * options_.weight_decay);
  p.add_(orthogonal.to(p.scalar_type()), -lr * lr_ratio(global_shape(state.param), options_.adjust_lr));
}

void Muon::step_adamw(AdamWState& state, double lr) {
  const auto& o = options_;
  at::Tensor& p = state.param.tensor;
  const at::Tensor& grad = p.grad();
  // The counter is a host tensor (a checkpoint loads into it), read in its
  // memory: the step reads nothing from the device.
  if (!state.step.is_cpu() || state.step.scalar_type() != at::kDouble || !state.step.is_contiguous()) {
    state.step = state.step.to(at::kCPU, at::kDouble).contiguous();
  }
  double& t = *state.step.data_ptr<double>();
  t += 1;
  if (o.adamw_weight_decay != 0) p.mul_(1 - lr * o.adamw_weight_decay);
  state.exp_avg.mul_(o.adamw_beta1).add_(grad, 1 - o.adamw_beta1);
  state.exp_avg_sq.mul_(o.adamw_beta2).addcmul_(grad, grad, 1 - o.adamw_beta2);
  at::Tensor denom = (state.exp_avg_sq.sqrt() / std::sqrt(1 - std::pow(o.adamw_beta2, t))).add_(o.adamw_eps);
  p.addcdiv_(state.exp_avg, denom, -lr / (1 - std::pow(o.adamw_beta1, t)));
}

void Muon::step(double lr) {
  at::NoGradGuard no_grad;
  // A parameter without a gradient is untouched. A sharded matrix's ranks
  // all have its gradient or all lack it (its parallelizer reduces it on
  // every rank), so they meet in the same collectives.
  for (auto& state : matrices_) {
    if (state.param.tensor.grad().defined()) step_matrix(state, lr);
  }
  for (auto& state : others_) {
    if (state.param.tensor.grad().defined()) step_adamw(state, lr);
  }
}

void Muon::zero_grad() {
  for (auto& state : matrices_) state.param.tensor.mutable_grad().reset();
  for (auto& state : others_) state.param.tensor.mutable_grad().reset();
}

std::map<std::string, at::Tensor> Muon::state_tensors() {
  std::map<std::string, at::Tensor> out;
  for (const auto& state : matrices_) out[state.param.name + ".momentum_buffer"] = state.momentum_buffer;
  for (const auto& state : others_) {
    out[state.param.name + ".exp_avg"] = state.exp_avg;
    out[state.param.name + ".exp_avg_sq"] = state.exp_avg_sq;
    out[state.param.name + ".step"] = state.step;
  }
  return out;
}

}  // namespace titan::muon
