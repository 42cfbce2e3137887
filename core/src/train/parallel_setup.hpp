// The trainer's view of the job's parallelism: the runtime and device mesh
// (none on one process unless a plugin asks for mesh dims: then a mesh of
// one rank), the checkpointer's group, this rank's data-parallel slot, and
// the reductions the loop needs (mean loss, global gradient norm).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/model.hpp"
#include "run_seams.hpp"
#include "titan/run_spec.hpp"

namespace titan {

class ParallelSetup {
 public:
  // `observer` hears of the rendezvous before the job's processes meet;
  // `simulated`, when set, makes the groups instead (no rendezvous).
  ParallelSetup(const World& world, const RunSpec& spec, RunObserver& observer, const GroupMaker& simulated = {});
  ~ParallelSetup();

  const DeviceMesh* mesh() const { return mesh_.get(); }
  // A group of all ranks used only by the checkpointer (none on one process).
  Comm* checkpoint_comm() const { return checkpoint_comm_.get(); }
  int dp_rank() const;
  int dp_degree() const;

  // The pipeline's stages and checked action lists, compiled once when the
  // degrees were resolved (null without a pipeline).
  const PipelineRun* pipeline_run() const { return pipeline_run_ ? &*pipeline_run_ : nullptr; }

  // The step's loss over the job (titan/training_step.hpp's loss_over_job),
  // read on the host: the validator's, once a validation.
  double loss_over_job(const at::Tensor& local_loss) const;

 private:
  std::unique_ptr<DistRuntime> runtime_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Comm> checkpoint_comm_;
  std::optional<PipelineRun> pipeline_run_;
};

}  // namespace titan
