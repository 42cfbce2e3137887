// FSDP2 semantics over the block-wrapper chain:
//   forward of block i:  unshard -> [post-backward marker] body [pre-backward marker] -> free
//   backward of block i: pre-backward marker refills the parameters, the
//   block's backward runs, the post-backward marker at its input
//   reduce-scatters the gradients and reshards.
// Prefetch: block i+1's all-gather starts before block i's forward body,
// and block i-1's before block i's backward, one unit ahead as in FSDP2.
// The root unit (embeddings, final norm, output) stays gathered from the
// start of forward to the end of backward, as FSDP2's root does.
#include "fsdp_parallelizer.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <set>

#include "fsdp_unit.h"
#include "titan/compat.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::fsdp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One FSDP unit's parameters, grouped by the ranks they are data-parallel
// over (dense weights over dp_shard; experts sharded over ep over efsdp):
// one Unit, so one collective each way, per group.
struct UnitSet {
  std::vector<std::unique_ptr<Unit>> units;
  // Under pipelining, the model (stage) whose schedule says when a step's
  // last backward runs: until then the unit keeps its gathered parameters
  // and lets the gradients accumulate unsharded (FSDP2 under a pipeline
  // schedule), so it gathers and reduce-scatters once a step, not once a
  // microbatch. Null: reduce after every backward.
  const CausalLM* deferred_by = nullptr;
  bool defers_reduction() const { return deferred_by && !deferred_by->gradient_sync(); }
  void prefetch() { for (auto& unit : units) unit->prefetch(); }
  void unshard() { for (auto& unit : units) unit->unshard(); }
  void free_unsharded() { for (auto& unit : units) unit->free_unsharded(); }
  void reshard() { for (auto& unit : units) unit->reshard(); }
  void reduce_gradients() { for (auto& unit : units) unit->reduce_gradients(); }
  void hold_gradients() { for (auto& unit : units) unit->hold_gradients(); }
  void install_gradients() { for (auto& unit : units) unit->install_gradients(); }
};

UnitSet* unit_of(AutogradContext* ctx) { return reinterpret_cast<UnitSet*>(ctx->saved_data["unit"].toInt()); }

// Identity whose backward runs once the unit's backward is complete: the
// gradient of the block's input is ready only after every parameter's.
struct PostBackward : torch::autograd::Function<PostBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t unit) {
    ctx->saved_data["unit"] = unit;
    return input;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    UnitSet* unit = unit_of(ctx);
    if (unit->defers_reduction()) {
      unit->hold_gradients();
    } else {
      unit->reduce_gradients();
    }
    return {grads[0], at::Tensor()};
  }
};

// Identity whose backward gathers the unit again before its backward.
struct PreBackward : torch::autograd::Function<PreBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, int64_t unit, int64_t prefetch) {
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["prefetch"] = prefetch;
    return output;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    unit_of(ctx)->unshard();
    // The unit whose backward comes next (the block before) starts its
    // all-gather now, overlapping this block's backward.
    if (int64_t next = ctx->saved_data["prefetch"].toInt()) reinterpret_cast<UnitSet*>(next)->prefetch();
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

int64_t handle(UnitSet& unit) { return reinterpret_cast<int64_t>(&unit); }

struct FsdpState {
  std::vector<std::unique_ptr<UnitSet>> blocks;
  std::unique_ptr<UnitSet> root;
  bool reshard_after_forward = true;

  void finalize() {
    // Units whose post-backward marker did not run (their input needed no
    // gradient) reduce here, in the same order on every rank.
    for (auto& block : blocks) block->reduce_gradients();
    if (root) root->reduce_gradients();
    for (auto& block : blocks) block->install_gradients();
    if (root) root->install_gradients();
  }
};

// The ranks each parameter is sharded and averaged over: dp_shard (x cp:
// under context parallelism each cp rank holds other tokens of the same
// sequences, so FSDP shards over dp_shard x cp and averages over both, as
// TorchTitan's dp_shard_cp mesh does), or, for a parameter sharded over a
// mesh split's inner dim (experts over ep), the split's outer dim (efsdp).
// Such a gradient is divided by `presummed` more: the inner dim's backward
// (the all-to-all) already summed the tokens of dp_shard_cp / efsdp
// data-parallel ranks (ep, or ep / tp where ep also borrows the tp ranks,
// which share data but split its tokens), so the whole divides by
// dp_shard_cp as the dense weights' mean does. The split must regroup the
// ranks FSDP shards over (and at most tp besides).
class DataParallelDims {
 public:
  struct Dim {
    std::string name;
    double presummed = 1;
  };

  explicit DataParallelDims(const DeviceMesh& mesh)
      : mesh_(mesh), shard_dim_(mesh.size("cp") > 1 ? "dp_shard_cp" : "dp_shard") {}

  const std::string& shard_dim() const { return shard_dim_; }

  Dim of(const std::string& param, const TensorLayout* inner) const {
    if (!inner) return {shard_dim_, 1};
    for (const auto& split : mesh_.splits()) {
      for (size_t i = 0; i < inner->mesh_dims.size(); ++i) {
        if (inner->mesh_dims[i] != split.inner || inner->placements[i].kind != Placement::Kind::shard) continue;
        if (dims_above_one(split.span, /*skip_tp=*/true) != dims_above_one(shard_dim_, false)) {
          throw Error("fsdp: parameter '" + param + "' is sharded over " + split.inner + ", a split of " + split.span +
                      ", but FSDP shards over " + shard_dim_ + " (other ranks); the split must regroup FSDP's ranks");
        }
        return {split.outer,
                static_cast<double>(mesh_.size(shard_dim_)) / static_cast<double>(mesh_.size(split.outer))};
      }
    }
    return {shard_dim_, 1};
  }

 private:
  std::vector<std::string> dims_above_one(const std::string& name, bool skip_tp) const {
    std::vector<std::string> dims;
    for (const auto& dim : mesh_dims_of(name)) {
      if (mesh_.size(dim) > 1 && !(skip_tp && dim == "tp")) dims.push_back(dim);
    }
    return dims;
  }

  const DeviceMesh& mesh_;
  std::string shard_dim_;
};

using ParamsByDim = std::map<std::string, std::vector<ShardedParam>>;

// Every trainable parameter cut to this rank's rows, per FSDP unit (each
// block, and the root: the rest) and data-parallel dim.
struct ShardedModel {
  std::vector<ParamsByDim> blocks;
  ParamsByDim root;
  std::map<std::string, double> presummed_over;  // per data-parallel dim
  int64_t on_dim_1 = 0;    // expert parameters with fewer experts than ranks, sharded on dim 1
  size_t extensions = 0;   // parameters gathered by their layer's all-gather extension (float8)
};

// Parameters whose layer gathers them its own way (float8 codes), by identity.
std::map<const void*, std::shared_ptr<AllGatherExtension>> all_gather_extensions(CausalLM& model) {
  std::map<const void*, std::shared_ptr<AllGatherExtension>> extension_of;
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (auto extension = std::dynamic_pointer_cast<AllGatherExtension>(module)) {
      at::Tensor param = extension->extended_parameter();
      if (param.defined()) extension_of[param.unsafeGetTensorImpl()] = extension;
    }
  }
  return extension_of;
}

// One parameter's rows on this rank of `group` and its layout (under 2-D
// parallelism the parameter is already a tensor-parallel piece: FSDP
// shards that piece's rows, as FSDP2 does over a TP DTensor); records the
// layout and leaves the meta parameter shaped as this rank's rows.
ShardedParam shard_parameter(CausalLM& model, const std::string& name, at::Tensor param, const TensorLayout* inner,
                             const DataParallelDims::Dim& dp, const Comm& group, const std::string& shard_dim) {
  const int64_t ranks = group.size(), rank = group.rank();
  ShardedParam p;
  p.name = name;
  p.param = param;
  p.unsharded_shape = param.sizes().vec();
  // Experts with fewer rows (this rank's experts) than efsdp ranks are
  // split on dim 1 instead, so every rank holds a share (TorchTitan's
  // Shard(1) where efsdp x ep > num_experts).
  const bool on_split = dp.name != shard_dim;
  p.shard_dim = on_split && param.dim() >= 2 && p.unsharded_shape[0] < ranks ? 1 : 0;
  const int64_t dim_rows = p.unsharded_shape[p.shard_dim];
  for (int64_t d = 0; d < p.shard_dim; ++d) p.outer *= p.unsharded_shape[d];
  p.rows = even_row_shard(dim_rows, ranks, rank);
  p.chunk_rows = (dim_rows + ranks - 1) / ranks;
  p.row_numel = dim_rows == 0 || p.outer == 0 ? 0 : param.numel() / (p.outer * dim_rows);
  std::vector<int64_t> local_shape = p.unsharded_shape;
  local_shape[p.shard_dim] = p.rows.length;

  TensorLayout layout = inner ? *inner : TensorLayout::replicated(p.unsharded_shape);
  layout.local_offset[p.shard_dim] += p.rows.begin;
  layout.local_shape[p.shard_dim] = p.rows.length;
  layout.mesh_dims.insert(layout.mesh_dims.begin(), {"dp_replicate", dp.name});
  layout.placements.insert(layout.placements.begin(), {Placement::replicate(), Placement::shard(p.shard_dim)});
  model.set_layout(p.name, layout);

  // Still on meta: materialization then allocates this rank's rows only.
  if (!param.is_meta()) {
    throw Error("fsdp: parameter '" + p.name + "' is already materialized; FSDP must run on the meta model");
  }
  param.set_data(at::empty(local_shape, param.options()));
  return p;
}

ShardedModel shard_parameters(CausalLM& model, const DeviceMesh& mesh, const DataParallelDims& dims) {
  // Which block owns each parameter (by tensor identity).
  std::map<const void*, int64_t> block_of;
  for (int64_t i = 0; i < model.num_blocks(); ++i) {
    for (const auto& param : model.block(i)->parameters()) block_of[param.unsafeGetTensorImpl()] = i;
  }
  const auto extension_of = all_gather_extensions(model);
  ShardedModel sharded;
  sharded.blocks.resize(static_cast<size_t>(model.num_blocks()));
  sharded.presummed_over[dims.shard_dim()] = 1.0;
  sharded.extensions = extension_of.size();
  for (auto& item : model.named_parameters()) {
    at::Tensor param = item.value();
    if (!param.requires_grad()) continue;
    if (param.dim() == 0) throw Error("fsdp: parameter '" + item.key() + "' is a scalar; FSDP shards dim 0");
    const TensorLayout* inner = model.layout(item.key());
    for (const auto& dim : inner ? inner->mesh_dims : std::vector<std::string>{}) {
      if (dim == "dp_shard" || dim == "dp_replicate" || dim == "dp_shard_cp" || dim == "cp") {
        throw Error("fsdp: parameter '" + item.key() + "' is already distributed over " + dim + " (" +
                    inner->describe() + "); apply one data-parallel plugin");
      }
    }
    const DataParallelDims::Dim dp = dims.of(item.key(), inner);
    sharded.presummed_over[dp.name] = dp.presummed;
    ShardedParam p = shard_parameter(model, item.key(), param, inner, dp, mesh.group(dp.name), dims.shard_dim());
    sharded.on_dim_1 += p.shard_dim;
    if (auto extension = extension_of.find(param.unsafeGetTensorImpl()); extension != extension_of.end()) {
      if (p.shard_dim != 0) {
        throw Error("fsdp: parameter '" + p.name + "' is sharded on dim 1 (fewer experts than " + dp.name +
                    " ranks) and gathered by an all-gather extension (float8), which needs dim 0; use fewer ranks "
                    "or a larger expert_parallel_degree");
      }
      p.extension = extension->second;
    }
    auto found = block_of.find(param.unsafeGetTensorImpl());
    ParamsByDim& unit = found == block_of.end() ? sharded.root : sharded.blocks[static_cast<size_t>(found->second)];
    unit[dp.name].push_back(std::move(p));
  }
  return sharded;
}

// The units: one per block and the root, each one Unit per data-parallel
// dim. Every rank makes the same units in the same order (dims by name),
// so their collectives match.
std::shared_ptr<FsdpState> build_units(CausalLM& model, ShardedModel& sharded, const DeviceMesh& mesh,
                                       const UnitGroups& groups, const DataParallelDims& dims,
                                       const ParallelizeContext& context, bool reshard_after_forward,
                                       bool pipelined) {
  auto unit_set = [&](const std::string& label, ParamsByDim& params) {
    auto set = std::make_unique<UnitSet>();
    for (auto& [dim, list] : params) {
      UnitGroups unit_groups = groups;
      unit_groups.shard = &mesh.group(dim);
      unit_groups.presummed = sharded.presummed_over.at(dim);
      set->units.push_back(std::make_unique<Unit>(dim == dims.shard_dim() ? label : label + " over " + dim,
                                                  std::move(list), unit_groups, context.param_dtype,
                                                  context.reduce_dtype));
    }
    return set;
  };
  auto state = std::make_shared<FsdpState>();
  state->reshard_after_forward = reshard_after_forward;
  for (size_t i = 0; i < sharded.blocks.size(); ++i) {
    state->blocks.push_back(unit_set("layers." + std::to_string(i), sharded.blocks[i]));
    if (pipelined) state->blocks.back()->deferred_by = &model;  // the model owns the wrapper that holds state
  }
  if (!sharded.root.empty()) state->root = unit_set("root", sharded.root);
  return state;
}

// The units into the model's block wrapper (gather, prefetch, the
// backward markers), its forward wrapper (the root) and its gradient
// finalizer.
void wire_units(CausalLM& model, const std::shared_ptr<FsdpState>& state, bool prefetch) {
  model.add_block_wrapper([state, prefetch](int64_t index, const at::Tensor& hidden, const BlockBody& inner) {
    const size_t i = static_cast<size_t>(index);
    UnitSet& unit = *state->blocks.at(i);
    unit.unshard();
    // The next block's all-gather overlaps this block's forward.
    if (prefetch && i + 1 < state->blocks.size()) state->blocks[i + 1]->prefetch();
    if (!at::GradMode::is_enabled()) {
      at::Tensor out = inner(hidden);
      unit.reshard();
      return out;
    }
    at::Tensor out = inner(PostBackward::apply(hidden, handle(unit)));
    if (state->reshard_after_forward) unit.free_unsharded();
    int64_t previous = prefetch && i > 0 ? handle(*state->blocks[i - 1]) : 0;
    return PreBackward::apply(out, handle(unit), previous);
  });
  model.add_forward_wrapper([state](const at::Tensor& tokens, const ForwardBody& inner) {
    if (state->root) state->root->unshard();
    at::Tensor out = inner(tokens);
    if (!at::GradMode::is_enabled() && state->root) state->root->reshard();
    return out;
  });
  model.add_gradient_finalizer([state] { state->finalize(); });
}

}  // namespace

std::vector<MeshDimRequest> FsdpParallelizer::mesh_dims() const {
  std::vector<MeshDimRequest> dims{{"dp_shard", options_.dp_shard}};
  if (options_.dp_replicate != 1) dims.push_back({"dp_replicate", options_.dp_replicate});
  return dims;
}

void FsdpParallelizer::parallelize(CausalLM& model, const ParallelizeContext& context) {
  if (!context.mesh) throw Error("fsdp: no device mesh (the trainer builds one when a plugin asks for mesh dims)");
  const DeviceMesh& mesh = *context.mesh;
  const DataParallelDims dims(mesh);
  UnitGroups groups;
  groups.shard = &mesh.group(dims.shard_dim());
  if (mesh.size("dp_replicate") > 1) groups.replicate = &mesh.group("dp_replicate");

  ShardedModel sharded = shard_parameters(model, mesh, dims);
  // TorchTitan's default: under pipelining a block runs forward once per
  // microbatch before its backwards, so freeing would cost an all-gather each time.
  const bool pipelined = mesh.size("pp") > 1;
  const ReshardAfterForward reshard = options_.reshard_after_forward;
  const bool reshard_after_forward =
      reshard == ReshardAfterForward::always || (reshard == ReshardAfterForward::pipeline_aware && !pipelined);
  auto state = build_units(model, sharded, mesh, groups, dims, context, reshard_after_forward, pipelined);
  wire_units(model, state, options_.prefetch);

  const char* reshard_why =
      reshard != ReshardAfterForward::pipeline_aware ? ""
      : pipelined                                    ? " (default: never under pipeline parallelism)"
                                                     : " (default)";
  spdlog::info("fsdp: {} blocks + root sharded over {}={}{}, params {} / reduce {}, reshard after forward: {}{}, prefetch: {}",
               state->blocks.size(), dims.shard_dim(), groups.shard->size(),
               groups.replicate ? " x dp_replicate=" + std::to_string(groups.replicate->size()) : std::string(),
               c10::toString(context.param_dtype), c10::toString(context.reduce_dtype),
               reshard_after_forward ? "yes" : "no", reshard_why, options_.prefetch ? "yes" : "no");
  if (sharded.on_dim_1 > 0) {
    spdlog::info("fsdp: {} expert parameters have fewer experts than FSDP ranks: sharded on dim 1", sharded.on_dim_1);
  }
  for (const auto& [dim, presummed] : sharded.presummed_over) {
    if (dim != dims.shard_dim()) {
      spdlog::info("fsdp: parameters sharded over a mesh split are sharded over {}={} (gradients divided by {} more)",
                   dim, mesh.size(dim), presummed);
    }
  }
  if (sharded.extensions > 0) {
    spdlog::info("fsdp: {} parameters are gathered as their layers ask (all-gather extensions, e.g. float8 codes)",
                 sharded.extensions);
  }
}

}  // namespace titan::fsdp
