#include "validator.hpp"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <chrono>

#include "parallel_setup.hpp"
#include "pipeline/pipeline_executor.hpp"
#include "titan/assets.hpp"
#include "titan/profile_range.hpp"

namespace titan {

Validator::Validator(const ValidationConfig& config, std::shared_ptr<const Tokenizer> tokenizer,
                     DocumentOptions documents, const ParallelSetup& parallel,
                     const c10::Device& device, PipelineExecutor* pipeline)
    : config_(config),
      tokenizer_(std::move(tokenizer)),
      documents_(documents),
      parallel_(parallel),
      device_(device),
      pipeline_(pipeline) {
  documents_.context_only_tokens = chat_template_named(config_.chat_template) != ChatTemplate::none;
}

// Every rank of the job votes, so that data-, context-, tensor- and
// pipeline-parallel peers leave the loop at the same batch.
bool Validator::all_ranks_continue(bool mine) const {
  const DeviceMesh* mesh = parallel_.mesh();
  if (!mesh || mesh->world_size() == 1) return mine;
  at::Tensor vote = at::full({1}, mine ? 1 : 0, at::kInt);
  mesh->group("world").all_reduce(vote, ReduceOp::min);
  return vote.item<int>() == 1;
}

ValidationResult Validator::run(CausalLM& model) {
  ProfileRange range("validation");
  const std::string data = config_.dataset_path.empty() ? config_.dataset : resolve_asset(config_.dataset_path);
  // A fresh loader: every validation sees the same windows from the start.
  const SourceOptions source_options{chat_template_named(config_.chat_template), tokenizer_, config_.text_field};
  TokenWindowLoader loader(open_dataset(data, source_options), tokenizer_, config_.seq_len, parallel_.dp_rank(),
                           parallel_.dp_degree());
  loader.set_documents(documents_);
  torch::NoGradGuard no_grad;
  model.eval();
  const auto start = std::chrono::steady_clock::now();
  at::Tensor total = at::zeros({}, at::TensorOptions(device_).dtype(at::kDouble));
  ValidationResult result;
  // As in training: the sum over every batch's labels that carry loss,
  // divided by their count (each batch weighted by its labels x the
  // data-parallel degree; the ranks' average divides that back out).
  const double dp_degree = static_cast<double>(parallel_.dp_degree());
  int64_t labels = 0;
  while (config_.steps < 0 ? all_ranks_continue(loader.epoch() == 0) : result.batches < config_.steps) {
    const at::Tensor windows = loader.next_batch(config_.local_batch_size);
    labels += loader.global_labels();
    const Microbatch batch = microbatch_of(windows, device_, documents_, dp_degree);
    // Through the pipeline only the last stage's rank has a loss (0 elsewhere).
    at::Tensor loss = pipeline_ ? pipeline_->evaluate(batch)
                                : weighted_loss(model.training_loss()(model.run(batch.inputs, batch.document_positions), batch.labels),
                                                loss_weight(batch, 1.0));
    total += loss.detach().to(total.device(), at::kDouble);
    ++result.batches;
  }
  model.train();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (labels > 0) result.loss = parallel_.loss_over_job(total / static_cast<double>(labels));
  result.tokens_per_sec =
      seconds > 0 ? static_cast<double>(result.batches * config_.local_batch_size * config_.seq_len) / seconds : 0;
  return result;
}

}  // namespace titan
