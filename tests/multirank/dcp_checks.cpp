// titan_dcp_checks: the `dcp` plugin on real ranks. `save` writes a state
// shaped like a model's (uneven and tiny shards, bf16, a scalar, per-rank
// RNG bytes) under one layout (tp: pieces split along the last dim); `load` reads it back under another and
// compares every local piece with the exact global values.
//
//   titan launch --nproc-per-node N -- titan_dcp_checks save|load DIR fsdp|hsdp|ddp|tp|single [async]
//
// Prints "DCP ok" when this rank's state is right, else each mismatch and
// exit status 1. `async` saves in the background and scribbles over the
// live tensors before waiting, so only a staged copy can be right.
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "titan/checkpointer.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/logging.hpp"
#include "titan/placement.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/world.hpp"

namespace {

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  bool sharded;  // under fsdp/hsdp; whole under ddp/single
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> all = {
      {"model.embed", {37, 8}, at::kFloat, true},       {"model.norm", {5}, at::kFloat, true},
      {"model.tiny", {2, 3}, at::kFloat, true},         {"model.w3", {6, 4, 2}, at::kBFloat16, true},
      {"optim.embed.exp_avg", {37, 8}, at::kFloat, true}, {"optim.embed.step", {}, at::kFloat, false}};
  return all;
}

// The global value of a tensor: a pure function of its name.
at::Tensor global_value(const Spec& spec) {
  int64_t salt = static_cast<int64_t>(std::hash<std::string>()(spec.name) % 1000);
  int64_t numel = 1;
  for (int64_t size : spec.shape) numel *= size;
  at::Tensor values = (at::arange(numel, at::kDouble) * 0.37 + salt).sin().reshape(spec.shape);
  return values.to(spec.dtype);
}

at::Tensor rank_bytes(int rank) { return (at::arange(16, at::kInt) * 3 + rank * 17).remainder(251).to(at::kByte); }

std::map<std::string, int64_t> degrees_for(const std::string& layout, int world_size) {
  if (layout == "fsdp") return {{"dp_shard", world_size}};
  if (layout == "hsdp") return {{"dp_replicate", 2}, {"dp_shard", world_size / 2}};
  if (layout == "ddp") return {{"dp_replicate", world_size}};
  if (layout == "tp") return {{"tp", world_size}};
  return {};
}

titan::TensorLayout layout_for(const Spec& spec, const std::string& layout, const titan::DeviceMesh& mesh) {
  titan::TensorLayout result;
  result.global_shape = spec.shape;
  result.local_offset.assign(spec.shape.size(), 0);
  result.local_shape = spec.shape;
  if (layout == "tp") {  // TP-style: split the last dim (columns), as a rowwise linear's weight
    size_t dim = spec.shape.size() - 1;
    titan::RowRange columns = titan::even_row_shard(spec.shape[dim], mesh.size("tp"), mesh.coordinate("tp"));
    result.local_offset[dim] = columns.begin;
    result.local_shape[dim] = columns.length;
    result.mesh_dims = {"tp"};
    result.placements = {titan::Placement::shard(static_cast<int64_t>(dim))};
    return result;
  }
  titan::RowRange rows = titan::even_row_shard(spec.shape[0], mesh.size("dp_shard"), mesh.coordinate("dp_shard"));
  result.local_offset[0] = rows.begin;
  result.local_shape[0] = rows.length;
  if (layout == "hsdp") {
    result.mesh_dims = {"dp_replicate", "dp_shard"};
    result.placements = {titan::Placement::replicate(), titan::Placement::shard(0)};
  } else {
    result.mesh_dims = {"dp_shard"};
    result.placements = {titan::Placement::shard(0)};
  }
  return result;
}

std::vector<std::string> failures;

void expect(bool ok, const std::string& what) {
  if (!ok) failures.push_back(what);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: titan_dcp_checks save|load DIR fsdp|hsdp|ddp|tp|single [async]\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[2], layout = argv[3];
  bool async = argc > 4 && std::string(argv[4]) == "async";
  try {
    titan::World world = titan::detect_world();
    titan::init_logging(world.rank, "warn");
    at::set_num_threads(1);
    std::unique_ptr<titan::DistRuntime> runtime;
    std::unique_ptr<titan::DeviceMesh> mesh;
    std::unique_ptr<titan::Comm> comm;
    if (layout != "single") {
      titan::DistTimeouts timeouts;
      timeouts.init = std::chrono::seconds(30);
      timeouts.collective = std::chrono::seconds(30);
      runtime = std::make_unique<titan::DistRuntime>(world, timeouts);
      mesh = std::make_unique<titan::DeviceMesh>(*runtime, degrees_for(layout, world.world_size));
      std::vector<int> everyone;
      for (int rank = 0; rank < world.world_size; ++rank) everyone.push_back(rank);
      comm = runtime->new_group("checkpoint", everyone);
    }
    titan::PluginRegistry::instance().load("dcp");
    titan::PluginContext context;
    context.options = titan::ConfigNode::parse("enable: true\nfolder: " + dir + "\nasync_mode: " +
                                                   (async ? "async" : "disabled") + "\n",
                                               "<dcp_checks>");
    context.rank = world.rank;
    context.world_size = world.world_size;
    context.training_steps = 100;
    auto checkpointer = titan::PluginRegistry::instance().create_checkpointer("dcp", context);
    checkpointer->attach({world.rank, world.world_size, mesh.get(), comm.get(), "checks: true"});

    titan::TrainState state;
    std::map<std::string, at::Tensor> expected;
    for (const auto& spec : specs()) {
      at::Tensor full = global_value(spec);
      bool sharded = spec.sharded && mesh && (layout == "fsdp" || layout == "hsdp" || layout == "tp");
      at::Tensor local = full;
      if (sharded) {
        titan::TensorLayout tensor_layout = layout_for(spec, layout, *mesh);
        local = titan::local_piece(full, tensor_layout).clone();
        state.layouts[spec.name] = tensor_layout;
      }
      expected[spec.name] = local.clone();
      state.tensors[spec.name] = mode == "save" ? local.clone() : at::zeros_like(local);
    }
    state.rank_local["rng.cpu"] = mode == "save" ? rank_bytes(world.rank) : at::zeros({16}, at::kByte);

    if (mode == "save") {
      state.values = {{"step", "7"}, {"data.position", "123"}};
      checkpointer->save(7, state);
      if (async) {
        for (auto& [name, tensor] : state.tensors) tensor.fill_(-1);  // after staging, before the write ends
      }
      checkpointer->wait();
    } else {
      auto step = checkpointer->load(state);
      expect(step.has_value() && *step == 7, "load returned no step 7");
      expect(state.values["data.position"] == "123", "data.position is '" + state.values["data.position"] + "'");
      for (const auto& [name, tensor] : state.tensors) {
        const at::Tensor& want = expected[name];
        bool same = tensor.sizes() == want.sizes() && tensor.scalar_type() == want.scalar_type() && tensor.equal(want);
        expect(same, name + ": loaded values differ from the saved ones");
      }
      bool same_world = std::getenv("DCP_SAVED_WORLD") &&
                        std::stoi(std::getenv("DCP_SAVED_WORLD")) == world.world_size;
      if (same_world) {
        expect(state.rank_local.count("rng.cpu") && state.rank_local["rng.cpu"].equal(rank_bytes(world.rank)),
               "rng.cpu of this rank was not restored");
      } else {
        expect(!state.rank_local.count("rng.cpu"), "rng.cpu of another world size was restored");
      }
    }
    if (comm) comm->barrier();
  } catch (const std::exception& error) {
    failures.push_back(std::string("exception: ") + error.what());
  }
  for (const auto& failure : failures) std::printf("DCP FAILED: %s\n", failure.c_str());
  if (failures.empty()) std::printf("DCP ok\n");
  std::fflush(stdout);
  return failures.empty() ? 0 : 1;
}
