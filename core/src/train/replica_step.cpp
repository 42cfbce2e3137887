// TrainingRun's side of fault tolerance: what a replica group refuses, the
// gradients averaged over the quorum, and joining it before each step
// (healing from a peer when behind).
#include "replica_step.hpp"

#include <ATen/ATen.h>

#include <chrono>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

void TrainingRun::ReplicaStepObserver::gradients_ready(CausalLM& model) {
  run.gradients_ready(model);
  std::vector<at::Tensor> gradients;
  for (const at::Tensor& p : parameters) gradients.push_back(p.grad());
  replicas.average_gradients(gradients);
}

// The model's hooks keep their state equal across groups themselves: they
// sum their step's numbers over the groups (StepHookContext).
void TrainingRun::use_replica_groups() {
  if (graphed_) {
    throw Error("fault_tolerance.enable: the step cannot be replayed from a CUDA graph when replica groups average "
                "its gradients; set training.cuda_graph: off");
  }
  replica_observer_ = std::make_unique<ReplicaStepObserver>(*observer, *replicas, step_parts_.parameters);
}

std::vector<std::pair<at::Tensor, at::Tensor>> TrainingRun::hook_state_copies() const {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const StepHook* hook : model->step_hooks()) {
    if (!hook->state) continue;
    for (const auto& [name, tensor] : hook->state()) copies.emplace_back(tensor, tensor.clone());
  }
  return copies;
}

int64_t TrainingRun::join_replica_groups(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  replicas->join(step - 1);
  if (replicas->transfers_state()) {
    TrainState current = state->capture(step - 1);
    if (replicas->transfer_state(current)) step = state->restore(current) + 1;
  }
  replica_join_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return step;
}

}  // namespace titan
