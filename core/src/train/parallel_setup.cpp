// ParallelSetup: joins the job and builds the mesh from the plugins' dims.
#include "parallel_setup.hpp"

#include <ATen/ATen.h>

#include "titan/error.hpp"
#include "titan/host_value.hpp"
#include "titan/logging.hpp"
#include "titan/training_step.hpp"

namespace titan {

ParallelSetup::ParallelSetup(const World& world, const RunSpec& spec, RunObserver& observer,
                             const GroupMaker& simulated) {
  const std::vector<MeshDimRequest> requests = mesh_requests(spec);
  if (!world.distributed() && requests.empty()) {
    validate_parallelism(spec, {});  // parallelizers without mesh dims still check the model
    return;
  }
  std::map<std::string, int64_t> degrees;
  try {
    degrees = resolve_mesh_degrees(requests, world.world_size);
  } catch (const Error& error) {
    throw Error(std::string(error.what()) +
                (requests.empty() ? ". No plugin uses the other ranks: add a data-parallel plugin to plugins: (one that "
                                    "asks for dp_shard or dp_replicate: `titan plugins list` shows them)"
                                  : ""));
  }
  pipeline_run_ = validate_parallelism(spec, degrees);  // before any group or weight exists
  DistTimeouts timeouts;
  timeouts.init = std::chrono::seconds(spec.core.comm.init_timeout_seconds);
  timeouts.collective = std::chrono::seconds(spec.core.comm.train_timeout_seconds);
  observer.before_rendezvous();
  const bool cuda = c10::Device(spec.core.training.device).is_cuda();
  runtime_ = simulated ? std::make_unique<DistRuntime>(world, simulated)
                      : std::make_unique<DistRuntime>(world, timeouts, cuda ? "nccl" : "gloo");
  mesh_ = std::make_unique<DeviceMesh>(*runtime_, degrees, mesh_splits(spec));
  if (!world.distributed()) return;
  spdlog::info("device mesh: {}", mesh_->describe());
  checkpoint_comm_ = runtime_->new_group("checkpoint", world.all_ranks());
}

ParallelSetup::~ParallelSetup() = default;

int ParallelSetup::dp_rank() const { return mesh_ ? static_cast<int>(mesh_->coordinate("dp")) : 0; }
int ParallelSetup::dp_degree() const { return mesh_ ? static_cast<int>(mesh_->size("dp")) : 1; }

double ParallelSetup::loss_over_job(const at::Tensor& local_loss) const {
  return host_value<double>(titan::loss_over_job(mesh_.get(), local_loss, /*with_max=*/false).average.sum());
}

}  // namespace titan
