// Runs one rank's checked pipeline action list (titan/pipeline_program.hpp)
// over its model parts: forwards, backwards (whole, or split into the input
// gradient and the weight gradient for the zero-bubble schedules), and the
// activations and gradients sent between pp ranks with tagged non-blocking
// point-to-point. It is the pipelined run's Schedule; the loss is computed
// on the last stage. evaluate() runs the same lists forward only
// (validation).
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/model.hpp"
#include "titan/pipeline_program.hpp"
#include "titan/microbatch_runner.hpp"

namespace titan {

struct PipelineExecutorOptions {
  // Run I as the input gradient and W as the weight gradient, W from the
  // gradients I kept (split_backward.hpp). Off: I runs the whole backward
  // and W nothing, for plugins that reduce gradients when a block's input
  // gradient is computed (FSDP, activation checkpointing's recompute);
  // results are the same.
  bool split_backward = true;
  std::string trace_path;  // Chrome-trace JSON of every action ("" none)
};

class PipelineExecutor : public MicrobatchRunner {
 public:
  // `parts[i]` runs stage `stages[i]` (rank_to_stages order); `pp` is the pp
  // group (null when the degree is 1); `pp_rank` this rank's place in it.
  PipelineExecutor(PipelineProgram program, std::vector<std::shared_ptr<CausalLM>> parts, std::vector<int64_t> stages,
                   Comm* pp, int64_t pp_rank, PipelineExecutorOptions options);
  ~PipelineExecutor() override;

  // One optimizer step: each batch split into the program's microbatches and
  // run through the pipeline, gradients of mean(loss over all microbatches)
  // accumulated. Runs the parts it was given (`model` is them seen as one)
  // with each last stage's own loss. Returns that mean loss on the rank of
  // the last stage and 0 on the others (0-dim, detached; the trainer sums
  // it over pp).
  at::Tensor forward_backward(CausalLM& model, const std::vector<Microbatch>& batches, const LossFn& loss) override;

  // TorchTitan's pp_schedule.eval(): the batch split into the program's
  // microbatches and run through each rank's list without gradients, only
  // its forwards and the activations they send (a subsequence of a checked
  // list finishes too: it only waits less). Returns the mean loss over the
  // microbatches on the rank of the last stage and 0 on the others (0-dim,
  // detached; the caller sums it over pp). Eval mode is the caller's.
  at::Tensor evaluate(const Microbatch& batch);

 private:
  struct Slot;  // one (stage, microbatch)'s tensors in a step
  struct Run;   // the state of one pass over the action list
  // Shape and dtype of what each stage receives from upstream.
  using StageShapes = std::map<int64_t, std::pair<std::vector<int64_t>, c10::ScalarType>>;
  void split(Run& run, const Microbatch& batch, int64_t batches) const;
  void run_actions(Run& run);
  void run_action(Run& run, const Action& action, size_t position);  // position: in this rank's list
  // Posts every recv of this rank's list whose buffer shape is known;
  // run_action waits for each where it stands.
  void post_recvs(Run& run);
  // The recv at `position`: the one posted ahead, or `buffer` received now.
  at::Tensor take_recv(Run& run, const Action& action, size_t position, at::Tensor buffer);
  size_t local_index(int64_t stage) const;
  void send(Run& run, const Action& action, const at::Tensor& tensor);
  at::Tensor recv_forward(Run& run, const Action& action, size_t position);
  void backward(Run& run, const Action& action, bool input_gradient, bool weight_gradient);
  void write_trace() const;

  PipelineProgram program_;
  std::vector<std::shared_ptr<CausalLM>> parts_;
  std::vector<int64_t> stages_;
  std::vector<std::vector<at::Tensor>> part_parameters_;
  Comm* pp_;
  int64_t pp_rank_;
  PipelineExecutorOptions options_;
  int64_t steps_run_ = 0, evaluations_run_ = 0;
  // Learned from a header the sender adds in the first step, and in the first
  // evaluation (its batch may have other sizes).
  StageShapes forward_shapes_, evaluate_shapes_;
  StageShapes output_shapes_;  // of this rank's stage outputs in training, for the gradients' buffers
  struct TraceEvent {
    std::string name;
    double start_us = 0, end_us = 0;
  };
  std::vector<TraceEvent> trace_;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
};

}  // namespace titan
