#include "checkpoint_fixture.h"

#include <ATen/ATen.h>

#include <cstring>
#include <functional>
#include <vector>

#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/placement.hpp"

namespace titan::conformance {

namespace {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  bool sharded;  // under fsdp/hsdp; whole under ddp/single
};

// 37 rows split unevenly; 2 rows leave ranks empty on 4 ranks; bf16; a
// scalar that is never sharded.
const std::vector<TensorSpec>& tensor_specs() {
  static const std::vector<TensorSpec> all = {
      {"model.embed", {37, 8}, at::kFloat, true},         {"model.norm", {5}, at::kFloat, true},
      {"model.tiny", {2, 3}, at::kFloat, true},           {"model.w3", {6, 4, 2}, at::kBFloat16, true},
      {"optim.embed.exp_avg", {37, 8}, at::kFloat, true}, {"optim.embed.step", {}, at::kFloat, false}};
  return all;
}

const std::map<std::string, std::string>& saved_values() {
  static const std::map<std::string, std::string> values = {{"step", std::to_string(kCheckpointStep)},
                                                            {"data.position", "123"}};
  return values;
}

at::Tensor global_value(const TensorSpec& spec) {
  int64_t salt = static_cast<int64_t>(std::hash<std::string>()(spec.name) % 1000);
  int64_t numel = 1;
  for (int64_t size : spec.shape) numel *= size;
  return (at::arange(numel, at::kDouble) * 0.37 + salt).sin().reshape(spec.shape).to(spec.dtype);
}

at::Tensor rank_bytes(int rank) { return (at::arange(16, at::kInt) * 3 + rank * 17).remainder(251).to(at::kByte); }

TensorLayout layout_for(const TensorSpec& spec, const std::string& layout, const DeviceMesh& mesh) {
  TensorLayout result;
  result.global_shape = spec.shape;
  result.local_offset.assign(spec.shape.size(), 0);
  result.local_shape = spec.shape;
  if (layout == "tp") {  // TP-style: split the last dim (columns), as a rowwise linear's weight
    size_t dim = spec.shape.size() - 1;
    RowRange columns = even_row_shard(spec.shape[dim], mesh.size("tp"), mesh.coordinate("tp"));
    result.local_offset[dim] = columns.begin;
    result.local_shape[dim] = columns.length;
    result.mesh_dims = {"tp"};
    result.placements = {Placement::shard(static_cast<int64_t>(dim))};
    return result;
  }
  RowRange rows = even_row_shard(spec.shape[0], mesh.size("dp_shard"), mesh.coordinate("dp_shard"));
  result.local_offset[0] = rows.begin;
  result.local_shape[0] = rows.length;
  if (layout == "hsdp") {
    result.mesh_dims = {"dp_replicate", "dp_shard"};
    result.placements = {Placement::replicate(), Placement::shard(0)};
  } else {
    result.mesh_dims = {"dp_shard"};
    result.placements = {Placement::shard(0)};
  }
  return result;
}

bool is_sharded(const TensorSpec& spec, const std::string& layout, const DeviceMesh* mesh) {
  return spec.sharded && mesh && (layout == "fsdp" || layout == "hsdp" || layout == "tp");
}

// This rank's exact piece under `layout`, plus its layout when sharded.
at::Tensor expected_piece(const TensorSpec& spec, const std::string& layout, const DeviceMesh* mesh,
                          TensorLayout* sharded_layout) {
  at::Tensor full = global_value(spec);
  if (!is_sharded(spec, layout, mesh)) return full;
  *sharded_layout = layout_for(spec, layout, *mesh);
  return local_piece(full, *sharded_layout).clone();
}

// Bit-for-bit: -0.0 vs 0.0 or a changed NaN payload count as different.
int64_t differing_elements(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor a = got.contiguous(), b = want.contiguous();
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b.data_ptr());
  int64_t size = a.element_size(), differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) differ += std::memcmp(pa + i * size, pb + i * size, size) != 0;
  return differ;
}

}  // namespace

std::map<std::string, int64_t> checkpoint_mesh_degrees(const std::string& layout, int world_size) {
  if (layout == "fsdp") return {{"dp_shard", world_size}};
  if (layout == "hsdp") return {{"dp_replicate", 2}, {"dp_shard", world_size / 2}};
  if (layout == "ddp") return {{"dp_replicate", world_size}};
  if (layout == "tp") return {{"tp", world_size}};
  return {};
}

void validate_checkpoint_layout(const std::string& layout, int world_size) {
  bool known = layout == "single" || layout == "fsdp" || layout == "hsdp" || layout == "ddp" || layout == "tp";
  if (!known) throw Error("checkpoint layout '" + layout + "' is not one of single, fsdp, hsdp, ddp, tp");
  if ((layout == "single") != (world_size == 1)) {
    throw Error("checkpoint layout '" + layout + "' on " + std::to_string(world_size) + " ranks");
  }
  if (layout == "hsdp" && (world_size < 4 || world_size % 2 != 0)) {
    throw Error("checkpoint layout hsdp needs an even world size >= 4, got " + std::to_string(world_size));
  }
}

TrainState make_checkpoint_state(const std::string& layout, const DeviceMesh* mesh, int rank, bool filled) {
  TrainState state;
  for (const auto& spec : tensor_specs()) {
    TensorLayout sharded_layout;
    at::Tensor piece = expected_piece(spec, layout, mesh, &sharded_layout);
    state.tensors[spec.name] = filled ? piece.clone() : at::zeros_like(piece);
    if (is_sharded(spec, layout, mesh)) state.layouts[spec.name] = sharded_layout;
  }
  state.rank_local["rng.cpu"] = filled ? rank_bytes(rank) : at::zeros({16}, at::kByte);
  if (filled) state.values = saved_values();
  return state;
}

void scribble_over(TrainState& state) {
  for (auto& [name, tensor] : state.tensors) tensor.fill_(-1);
  for (auto& [name, tensor] : state.rank_local) tensor.fill_(255);
}

StateComparison compare_loaded(std::optional<int64_t> step, const TrainState& loaded,
                               const std::map<std::string, at::Tensor>& held, const std::string& layout,
                               const DeviceMesh* mesh, int rank, bool same_world) {
  StateComparison out;
  for (const auto& spec : tensor_specs()) {
    TensorLayout unused;
    at::Tensor want = expected_piece(spec, layout, mesh, &unused);
    const at::Tensor& got = held.at(spec.name);
    auto entry = loaded.tensors.find(spec.name);
    std::string problem;
    if (entry == loaded.tensors.end() || !entry->second.is_same(got)) {
      problem = "replaced in the state instead of filled in place";  // the trainer's parameters would keep old values
    } else if (got.scalar_type() != want.scalar_type() || !got.sizes().equals(want.sizes())) {
      problem = "changed its dtype or shape";
    } else if (int64_t differ = differing_elements(got, want)) {
      problem = std::to_string(differ) + " of " + std::to_string(want.numel()) + " elements differ from the saved values";
    }
    if (!problem.empty() && out.wrong_tensors++ == 0) out.first_wrong = spec.name + ": " + problem;
  }
  out.values_ok = step == kCheckpointStep && loaded.values == saved_values();
  out.values_detail = !step                      ? "load() returned no step"
                      : *step != kCheckpointStep ? "load() returned step " + std::to_string(*step)
                      : out.values_ok            ? "step and values as saved"
                                                 : "the values (e.g. data.position) differ from the saved ones";
  auto rng = loaded.rank_local.find("rng.cpu");
  bool restored = rng != loaded.rank_local.end() && rng->second.sizes().equals({16}) &&
                  rng->second.scalar_type() == at::kByte &&
                  differing_elements(rng->second, rank_bytes(rank)) == 0;
  bool untouched = rng == loaded.rank_local.end() ||
                   (rng->second.sizes().equals({16}) && rng->second.scalar_type() == at::kByte &&
                    differing_elements(rng->second, at::zeros({16}, at::kByte)) == 0);
  out.rank_local_ok = same_world ? restored : untouched;
  out.rank_local_detail = same_world ? (restored ? "this rank's rng.cpu restored" : "this rank's rng.cpu not restored")
                                     : (untouched ? "per-rank state of another world size left out"
                                                  : "rng.cpu of another world size was restored");
  return out;
}

}  // namespace titan::conformance
