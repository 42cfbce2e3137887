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
#include "titan/grad_clip.hpp"
#include "titan/model.hpp"
#include "titan/run_plan.hpp"

namespace titan {

class ParallelSetup {
 public:
  ParallelSetup(const World& world, const RunPlan& plan);
  ~ParallelSetup();

  const DeviceMesh* mesh() const { return mesh_.get(); }
  // A group of all ranks used only by the checkpointer (none on one process).
  Comm* checkpoint_comm() const { return checkpoint_comm_.get(); }
  int dp_rank() const;
  int dp_degree() const;

  // The pipeline's stages and checked action lists, planned once when the
  // degrees were resolved (null without a pipeline).
  const PipelineRun* pipeline_run() const { return pipeline_run_ ? &*pipeline_run_ : nullptr; }

  // The step's loss, the same on every rank, from this rank's: only the last
  // pipeline stage computed it (summed over pp), and data- and
  // context-parallel ranks each saw an equal share of the batch (the mean
  // over dp_cp). The one place the loss is reduced.
  double loss_over_job(const at::Tensor& local_loss) const { return loss_stats_over_job(local_loss, false).average; }
  // The same mean, and (with `with_max`) the largest of the dp_cp ranks'
  // losses, TorchTitan's global_max_loss (otherwise max = average).
  struct JobLoss {
    double average = 0, max = 0;
  };
  JobLoss loss_stats_over_job(const at::Tensor& local_loss, bool with_max) const;
  // The same as fp64 tensors [1] on the loss's device, nothing read on the
  // host (the training step's; a log step reads them).
  struct JobLossTensors {
    at::Tensor average, max;
  };
  JobLossTensors loss_tensors_over_job(const at::Tensor& local_loss, bool with_max = true) const;
  // Sums a per-rank partial over the world (max for the inf norm), in place.
  NormTensorReduceFn norm_reduce() const;
  // Per parameter: 1 / the number of ranks holding the same gradient copy.
  std::vector<double> norm_weights(const CausalLM& model, const std::vector<std::string>& names) const;

 private:
  std::unique_ptr<DistRuntime> runtime_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Comm> checkpoint_comm_;
  std::optional<PipelineRun> pipeline_run_;
};

}  // namespace titan
