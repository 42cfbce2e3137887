// The validation section (TorchTitan's validator): every `freq` steps a
// pass in eval mode without gradients over a held-out set, from its start
// each time, through the same model and parallelisms as training; the loss
// is reduced over the job like the training loss. A pipelined run goes
// through its schedule forward only (PipelineExecutor::evaluate), and the
// last stage's loss is summed over pp, so every rank logs the same.
// `steps: -1` runs the set once: the ranks agree on the end (a global window
// count) and stop together, so none waits on a collective the others never
// issue.
#pragma once
#include <cstdint>
#include <memory>

#include "titan/data.hpp"
#include "titan/job_config.hpp"
#include "titan/model.hpp"

namespace titan {

class ParallelSetup;
class PipelineExecutor;

struct ValidationResult {
  double loss = 0;
  int64_t batches = 0;
  double tokens_per_sec = 0;  // this rank's
};

class Validator {
 public:
  // `pipeline`: the executor of a pipelined run (null otherwise).
  // `documents`: block-causal positions and ignored labels, as in training.
  Validator(const ValidationConfig& config, std::shared_ptr<const Tokenizer> tokenizer,
            DocumentOptions documents, const ParallelSetup& parallel, const c10::Device& device,
            PipelineExecutor* pipeline);
  bool due(int64_t step) const { return config_.enable && step % config_.freq == 0; }
  ValidationResult run(CausalLM& model);

 private:
  bool all_ranks_continue(bool mine) const;
  ValidationConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  DocumentOptions documents_;
  const ParallelSetup& parallel_;
  c10::Device device_;
  PipelineExecutor* pipeline_;
};

}  // namespace titan
