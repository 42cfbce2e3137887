// One training step, the one sequence the trainer runs and titan-conformance
// certifies plugins with: forward and backward over the step's microbatches
// (a schedule: gradient accumulation, a schedule plugin or the pipeline),
// the model's gradient finalization, the loss over the job, the gradient
// norm (and clipping), the model's own work before the optimizer (its step
// hooks: MoE load balancing), the optimizer, and the gradients cleared.
// Nothing in it reads a tensor's value on the host, except the one
// finiteness read that StepOptions::skip_nonfinite asks for.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "titan/device_mesh.hpp"
#include "titan/grad_clip.hpp"
#include "titan/model.hpp"
#include "titan/optimizer.hpp"
#include "titan/microbatch_runner.hpp"

namespace titan {

// The step's loss, the same on every rank, from this rank's: only the last
// pipeline stage computed it (summed over pp), and data- and
// context-parallel ranks each saw an equal share of the batch (averaged over
// dp_cp). `max` is the largest of the dp_cp ranks' (TorchTitan's
// global_max_loss), or the average without `with_max`. Both fp64 [1] on the
// loss's device. A null mesh: one process, the loss as it is.
struct JobLossTensors {
  at::Tensor average, max;
};
JobLossTensors loss_over_job(const DeviceMesh* mesh, const at::Tensor& local_loss, bool with_max = true);

// How this rank's partial gradient norm combines with the others' (a sum,
// or a max for the inf norm, over every rank); empty without a mesh.
NormTensorReduceFn norm_reduce_over(const DeviceMesh* mesh);
// Per named parameter: 1 / the number of ranks holding the same gradient
// copy (its layout's replication; no layout: every rank); empty without a
// mesh.
std::vector<double> norm_weights_over(const DeviceMesh* mesh, const CausalLM& model,
                                      const std::vector<std::string>& names);

// What a step runs on, built once.
struct StepParts {
  CausalLM* model = nullptr;  // a pipeline's parts seen as one model, when pipelined
  MicrobatchRunner* runner = nullptr;
  Optimizer* optimizer = nullptr;
  const DeviceMesh* mesh = nullptr;    // null on one process
  std::vector<at::Tensor> parameters;  // trainable, in the norm's order
  std::vector<double> norm_weights;    // norm_weights_over(mesh, ...) for `parameters`
  double max_norm = 0;                 // clip to this global norm; <= 0 or inf: measure only
};

// Where a caller looks in on, or steps into, the step: the trainer's test
// hooks (fault injection), titan-conformance's checks of the gradients.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // After the gradients are finalized (every data-parallel reduction done),
  // before they are clipped.
  virtual void gradients_ready(CausalLM& /*model*/) {}
  // The job's loss as the rest of the step sees it (a test can make it NaN).
  virtual at::Tensor loss_seen(const at::Tensor& loss) { return loss; }
  // Whether the step's gradients are whole everywhere (fault tolerance's
  // vote across replica groups); false discards the step: no optimizer.
  virtual bool should_commit() { return true; }
  // Just before the optimizer steps (not called when it is skipped).
  virtual void before_optimizer() {}
};

// Runs `forward_backward` over the microbatches, the way a caller wants it
// run (training.cuda_graph replays it from a graph); by default, directly.
using ForwardBackward = std::function<at::Tensor(const std::vector<Microbatch>&)>;
using ForwardBackwardRunner =
    std::function<at::Tensor(const std::vector<Microbatch>&, const ForwardBackward& forward_backward)>;

struct StepOptions {
  double lr = 0;
  bool log_step = false;  // the step hooks' metrics are wanted (reading them may wait for the device)
  // A non-finite loss or norm skips the optimizer: one host read a step
  // (training.on_nonfinite_loss: skip).
  bool skip_nonfinite = false;
  // StepResult::state_bytes wanted (the metrics of log steps, the dry run):
  // counting walks the optimizer's state by name, host work a step spares.
  bool count_state_bytes = true;
  StepObserver* observer = nullptr;
  ForwardBackwardRunner runner;  // empty: forward_backward is called directly
  // For the step hooks: a sum over fault tolerance's replica groups (empty without them).
  std::function<void(at::Tensor&)> sum_over_replica_groups;
};

struct StepResult {
  at::Tensor loss;       // the job's, fp64 [1] (as the observer's loss_seen returned it)
  at::Tensor max_loss;   // the largest dp_cp rank's, fp64 [1]; the loss where that is not finite
  at::Tensor grad_norm;  // the global norm before clipping, fp64 [1] on the loss's device
  at::Tensor finite;     // bool [1]: loss and norm both finite
  std::map<std::string, double> model_metrics;  // the step hooks' (on log steps)
  // Parameters, gradients and optimizer state this rank held before the
  // gradients were cleared (the step's peak of them); 0 unless
  // StepOptions::count_state_bytes.
  int64_t state_bytes = 0;
  bool optimizer_skipped = false;
  bool discarded = false;  // the observer's should_commit() said no (the optimizer skipped too)
};

StepResult run_training_step(const StepParts& parts, const std::vector<Microbatch>& microbatches,
                             const StepOptions& options);

}  // namespace titan
