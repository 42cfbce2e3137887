// training.cuda_graph: whether a run's forward and backward passes are
// captured into a CUDA graph. `auto` (the default) captures on CUDA
// wherever the run allows it and logs why not where it does not; `true`
// refuses such a run with the same reason; `false` never captures.
#pragma once
#include <string>

#include "titan/job_config.hpp"

namespace titan {

// What of a run decides whether its step can be replayed from a graph.
struct CudaGraphFacts {
  bool cuda = false;
  bool pipeline = false;  // the schedule runs from the host, action by action
  int world_size = 1;
  bool collectives = false;  // a device mesh, even of one rank (its groups' collectives)
  std::string host_driven;  // why the model's step hooks need host values ("" for none: StepHook)
  // The microbatches' loss weights change from step to step (ignored labels:
  // a graph would replay the captured step's weights).
  bool varying_loss_weights = false;
};

struct CudaGraphChoice {
  bool capture = false;
  std::string why_not;  // why a CUDA run under `auto` is not captured ("" otherwise)
};

// Throws (naming the reason and the switch) when `setting` is `true` and
// the run cannot be captured.
CudaGraphChoice choose_cuda_graph(TrainingConfig::CudaGraph setting, const CudaGraphFacts& run);

}  // namespace titan
