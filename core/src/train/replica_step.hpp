// The step's part in fault tolerance (core/src/ft/replica_groups.hpp): after
// the gradients are finalized inside the group, they are averaged over the
// quorum's groups; before the optimizer, the group votes.
#pragma once
#include <vector>

#include "ft/replica_groups.hpp"
#include "run_seams.hpp"
#include "training_run.hpp"

namespace titan {

struct TrainingRun::ReplicaStepObserver : StepObserver {
  ReplicaStepObserver(RunObserver& run, ReplicaGroups& replicas, std::vector<at::Tensor> parameters)
      : run(run), replicas(replicas), parameters(std::move(parameters)) {}

  void gradients_ready(CausalLM& model) override;
  at::Tensor loss_seen(const at::Tensor& loss) override { return run.loss_seen(loss); }
  bool should_commit() override { return run.should_commit() && replicas.should_commit(); }
  void before_optimizer() override { run.before_optimizer(); }

  RunObserver& run;
  ReplicaGroups& replicas;
  const std::vector<at::Tensor> parameters;
};

}  // namespace titan
