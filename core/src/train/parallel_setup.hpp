// The trainer's view of the job's parallelism: the runtime and mesh when
// distributed (none on one process), this rank's data-parallel slot, and
// (a mesh of one rank when a plugin asks for mesh dims on one process), and
// the reductions the loop needs (mean loss, global gradient norm).
#pragma once
#include <memory>
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
  int rank() const { return world_.rank; }
  int dp_rank() const;
  int dp_degree() const;

  // Mean of the data-parallel and context-parallel ranks' losses (each saw
  // equally many tokens of the batch).
  double mean_over_batch(double local_loss) const;
  // Sums a per-rank partial over the world (max for the inf norm).
  NormReduceFn norm_reduce() const;
  // Per parameter: 1 / the number of ranks holding the same gradient copy.
  std::vector<double> norm_weights(const CausalLM& model, const std::vector<std::string>& names) const;
  // Sum over the world of a per-rank count (e.g. bytes).
  int64_t sum_over_world(int64_t local) const;

 private:
  World world_;
  std::unique_ptr<DistRuntime> runtime_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Comm> checkpoint_comm_;
};

}  // namespace titan
