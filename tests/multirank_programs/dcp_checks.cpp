// titan_dcp_checks: the `dcp` plugin on real ranks. `save` writes the
// conformance harness's checkpoint state (uneven and empty shards, bf16, a
// scalar, per-rank RNG bytes; tools/conformance/checkpoint_fixture.h) under
// one layout (tp: pieces split along the last dim); `load` reads it back
// under another and compares every local piece with the exact global values.
//
//   titan launch --nproc-per-node N -- titan_dcp_checks save|load DIR fsdp|hsdp|ddp|tp|single [async]
//
// Prints "DCP ok" when this rank's state is right, else each mismatch and
// exit status 1. `async` saves in the background and scribbles over the
// live tensors before waiting, so only a staged copy can be right.
#include <ATen/ATen.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "checkpoint_fixture.h"
#include "titan/checkpointer.hpp"
#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/logging.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/world.hpp"

namespace {

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
    titan::conformance::validate_checkpoint_layout(layout, world.world_size);
    std::unique_ptr<titan::DistRuntime> runtime;
    std::unique_ptr<titan::DeviceMesh> mesh;
    std::unique_ptr<titan::Comm> comm;
    if (layout != "single") {
      titan::DistTimeouts timeouts;
      timeouts.init = std::chrono::seconds(30);
      timeouts.collective = std::chrono::seconds(30);
      runtime = std::make_unique<titan::DistRuntime>(world, timeouts);
      mesh = std::make_unique<titan::DeviceMesh>(*runtime,
                                                 titan::conformance::checkpoint_mesh_degrees(layout, world.world_size));
      comm = runtime->new_group("checkpoint", world.all_ranks());
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

    titan::TrainState state = titan::conformance::make_checkpoint_state(layout, mesh.get(), world.rank, mode == "save");
    if (mode == "save") {
      checkpointer->save(titan::conformance::kCheckpointStep, state);
      if (async) titan::conformance::scribble_over(state);  // after staging, before the write ends
      checkpointer->wait();
    } else {
      std::map<std::string, at::Tensor> held = state.tensors;
      auto step = checkpointer->load(state);
      bool same_world = std::getenv("DCP_SAVED_WORLD") &&
                        std::stoi(std::getenv("DCP_SAVED_WORLD")) == world.world_size;
      auto loaded = titan::conformance::compare_loaded(step, state, held, layout, mesh.get(), world.rank, same_world);
      expect(loaded.wrong_tensors == 0, loaded.first_wrong);
      expect(loaded.values_ok, loaded.values_detail);
      expect(loaded.rank_local_ok, loaded.rank_local_detail);
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
