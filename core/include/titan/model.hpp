// ModelSpec (a model family's flavors, costs and plans) and CausalLM, the
// module the trainer drives. The model knows nothing of parallelism: its
// forward runs every block through run_block(), where plugins wrap it, its
// layers are found by path (module_path.hpp) and swapped by plugins, and its
// loss is a slot a plugin may fill (loss parallel, a fused loss head).
#pragma once
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/placement.hpp"

namespace titan {

// A block's forward. It must stay callable after forward() returns (capture
// by value): activation checkpointing calls it again in backward.
using BlockBody = std::function<at::Tensor(const at::Tensor& hidden)>;
// A wrapper gets the block index, its input and the next layer of the chain,
// which it may keep and call later.
using BlockWrapper =
    std::function<at::Tensor(int64_t block, const at::Tensor& hidden, const BlockBody& inner)>;
using ForwardBody = std::function<at::Tensor(const at::Tensor& tokens)>;
using ForwardWrapper = std::function<at::Tensor(const at::Tensor& tokens, const ForwardBody& inner)>;
// The global positions ([seq] int64, on the CPU) of the `seq` tokens a
// forward sees.
using PositionsFn = std::function<at::Tensor(int64_t seq)>;
// What forward() returned, labels -> mean loss over the labels that carry
// loss (-100, PyTorch's ignore_index, carries none); the schedules weight it
// by the microbatch's share of the step's labels (schedule.hpp).
using LossFn = std::function<at::Tensor(const at::Tensor& logits, const at::Tensor& labels)>;

// The default loss: mean token cross-entropy in float32 over whole logits
// [batch, seq, vocab] (TorchTitan's loss).
at::Tensor cross_entropy_loss(const at::Tensor& logits, const at::Tensor& labels);

class DeviceMesh;

// What the trainer tells a step hook.
struct StepHookContext {
  const DeviceMesh* mesh = nullptr;  // null on one process
  bool log_step = false;             // the step logs: its metrics are wanted (reading them may wait for the device)
  // Sums a tensor over the replica groups of a fault-tolerant job, the
  // data-parallel replicas outside `mesh` (null without them). A failure is
  // the step's: the step is discarded and the hooks' state put back.
  std::function<void(at::Tensor&)> sum_over_replica_groups;
};

// Work a model (or one of its layers) needs around the trainer's step
// besides forward and backward, registered by the model so that the trainer
// runs it without knowing what it is (MoE load balancing, titan/moe.hpp).
struct StepHook {
  std::string name;  // for messages: "MoE load balancing"
  // After the step's last backward and gradient clipping, before the
  // optimizer (TorchTitan's optimizer pre-step hooks). Returns the step's
  // metrics ("moe/<router>/imbalance"), empty unless context.log_step.
  std::function<std::map<std::string, double>(const StepHookContext& context)> before_optimizer;
  // Training state the optimizer does not hold, by name relative to the
  // model, whole on every rank that holds it: checkpointed (as
  // "model.<name>") and saved with the final model.
  std::function<std::map<std::string, at::Tensor>()> state;
  // Why the step needs values on the host ("" when it does not): such a
  // step is neither replayed from a CUDA graph nor planned on meta tensors.
  std::string host_driven;
};

class CausalLM : public torch::nn::Module {
 public:
  // tokens [batch, seq] (int64) -> logits [batch, seq, vocab]
  virtual at::Tensor forward(const at::Tensor& tokens) = 0;
  virtual int64_t num_blocks() const = 0;
  virtual std::shared_ptr<torch::nn::Module> block(int64_t index) = 0;
  // Fills `values` (fp32, CPU, the parameter's global shape) by the model's
  // init rule for parameter `name` (TorchTitan's scheme), from a generator
  // seeded by (seed, name): values do not depend on init order, device, or
  // which other parameters exist.
  virtual void init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const = 0;
  // Recomputes buffers (e.g. rotary tables) once parameters are materialized.
  virtual void init_buffers() = 0;
  // Initializes every parameter one at a time: its global value is drawn on
  // CPU and this rank's piece (per layout()) kept, so a sharded model equals
  // the single-process one and no rank ever holds the whole model.
  void init_weights(uint64_t seed);

  // The trainer's entry point: forward() inside the model-level wrappers
  // (e.g. FSDP's root unit gathers the embeddings and output around it).
  // `document_positions` ([batch, seq] int64 on the tokens' device, each
  // token's position within its document, 0 where one starts; undefined:
  // one document a row) asks for block-causal attention over the whole
  // sequence's documents (model.attn_mask_type: block_causal): forward()
  // reads it through document_positions() while this call runs. On a later
  // pipeline stage `tokens` are hidden states and the positions still the
  // microbatch's.
  at::Tensor run(const at::Tensor& tokens, const at::Tensor& document_positions = at::Tensor());
  // Whether forward() honours document_positions (block-causal attention
  // and rotary positions by document); the trainer refuses block_causal
  // for a model that does not.
  virtual bool supports_documents() const { return false; }

  // Wrappers compose like middleware: the last added runs outermost.
  void add_block_wrapper(BlockWrapper wrapper) { wrappers_.push_back(std::move(wrapper)); }
  void add_forward_wrapper(ForwardWrapper wrapper) { forward_wrappers_.push_back(std::move(wrapper)); }

  // The model's step hooks (a pipeline rank's: every stage's), in order.
  void add_step_hook(StepHook hook) { step_hooks_.push_back(std::move(hook)); }
  virtual std::vector<const StepHook*> step_hooks() const;

  // Run after the last backward of a step, before gradient clipping: data
  // parallelism finishes its gradient reductions here.
  void add_gradient_finalizer(std::function<void()> finalizer) { finalizers_.push_back(std::move(finalizer)); }
  void finalize_gradients();
  // Schedules clear this for all but the last microbatch of a step, so data
  // parallelism may leave still-accumulating gradients unreduced (FSDP2's
  // set_requires_gradient_sync).
  void set_gradient_sync(bool enabled) { gradient_sync_ = enabled; }
  bool gradient_sync() const { return gradient_sync_; }

  // The loss the schedules apply to forward()'s result: cross_entropy_loss
  // unless a plugin set another (TP gathers vocab-sharded logits first; loss
  // parallel computes it on the shards).
  void set_loss(LossFn loss) { loss_ = std::move(loss); }
  const LossFn& loss() const { return loss_; }
  // The model's own objective around the loss slot, for a forward() that
  // returns more than one set of logits (DeepSeek-V3's multi-token
  // prediction: the main logits and each depth's, stacked along the batch;
  // its objective applies `loss` to each with its own labels). Unset: the
  // loss slot alone. Plugins set the slot; the model sets this.
  using Objective = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& labels, const LossFn& loss)>;
  void set_objective(Objective objective) { objective_ = std::move(objective); }
  // What the schedules and the validator apply to forward()'s output: the
  // objective around loss().
  LossFn training_loss() const;
  // A later pipeline stage's forward() takes hidden states; the pipeline
  // hands the stage with the head the microbatch's token ids here too
  // (undefined elsewhere), for a head that embeds them (multi-token
  // prediction).
  void set_stage_tokens(at::Tensor tokens) { stage_tokens_ = std::move(tokens); }
  const at::Tensor& stage_tokens() const { return stage_tokens_; }
  // The mesh dim the logits' vocab dim is split over ("" when whole): set by
  // the plugin that shards the output head, read by loss parallel.
  void set_logits_vocab_sharded_over(std::string mesh_dim) { logits_vocab_sharded_over_ = std::move(mesh_dim); }
  const std::string& logits_vocab_sharded_over() const { return logits_vocab_sharded_over_; }

  // Positions of the tokens forward() receives, for position embeddings:
  // 0..seq-1 unless a plugin that splits the sequence (context parallelism)
  // set them, so a rank's rotary rows are the slice of the whole sequence's.
  void set_positions(PositionsFn positions) { positions_ = std::move(positions); }
  bool has_positions() const { return static_cast<bool>(positions_); }
  at::Tensor positions(int64_t seq) const;
  // The largest of positions(seq), read in host memory (-1 for none): the
  // rotary tables must cover it, and checking dispatches nothing.
  int64_t last_position(int64_t seq) const;

  // Sharding metadata per parameter name; none recorded = replicated whole.
  void set_layout(const std::string& name, TensorLayout layout) { layouts_[name] = std::move(layout); }
  const TensorLayout* layout(const std::string& name) const;

 protected:
  at::Tensor run_block(int64_t index, const at::Tensor& hidden, const BlockBody& body) const;
  // The document positions of the run() in progress (undefined: causal).
  const at::Tensor& document_positions() const { return document_positions_; }

 private:
  BlockBody wrapped_body(int64_t index, size_t depth, const BlockBody& body) const;

  std::vector<BlockWrapper> wrappers_;
  std::vector<ForwardWrapper> forward_wrappers_;
  std::vector<std::function<void()>> finalizers_;
  std::vector<StepHook> step_hooks_;
  std::map<std::string, TensorLayout> layouts_;
  bool gradient_sync_ = true;
  LossFn loss_ = cross_entropy_loss;
  Objective objective_;
  at::Tensor stage_tokens_;
  std::string logits_vocab_sharded_over_;
  PositionsFn positions_;
  at::Tensor document_positions_;
};

// Allocates every parameter and buffer still on the meta device on `device`,
// in place (uninitialized; CausalLM::init_weights fills parameters). Run
// after the parallelizers, so only this rank's pieces are allocated.
void materialize_module(torch::nn::Module& module, const c10::Device& device);

// How tensor parallelism splits a layer (TorchTitan's ParallelStyles):
//   colwise: a Linear's output features (weight Shard(0)); the output head's
//     vocabulary when it is the model's last layer;
//   rowwise: a Linear's input features (weight Shard(1), partial output
//     reduced); an Embedding's vocabulary (weight Shard(0), masked lookup);
//   sequence_parallel_norm: a norm run on a sequence shard (weight whole);
//   no_parallel: a layer every rank runs whole (TorchTitan's NoParallel),
//     its weight whole; each rank uses its output for its own share (its
//     heads: qwen3's q/k norms, DeepSeek-V3's kv latent), so the weight's
//     gradient is summed over tp;
//   per_head: a module's own per-head parameters (GPT-OSS's attention
//     sinks [n_heads]), each split over tp along dim 0 as the colwise
//     projections split the heads; the module is not swapped.
// A Linear's bias goes with its weight: split with a colwise one's output
// features, whole and added after the reduction of a rowwise one's.
// MoE layers (titan/moe.hpp) need no entry: the plugin finds them itself.
enum class TpStyle { colwise, rowwise, sequence_parallel_norm, no_parallel, per_head };

// A model size tensor parallelism must divide, with the config key (or the
// source) that sets it, for validation messages.
struct ShardableSize {
  std::string key;   // "model.n_heads", "vocabulary (model.tokenizer_path)"
  std::string what;  // "attention heads"
  int64_t value = 0;
};

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;
  virtual std::string flavor() const = 0;
  // The tokenizer decides the vocabulary (as in TorchTitan).
  virtual void set_vocab_size(int64_t vocab_size) = 0;
  // Builds the module; on the meta device no parameter memory is used.
  virtual std::shared_ptr<CausalLM> build(const c10::Device& device) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t num_params(bool include_embedding = true) const = 0;
  // Training FLOPs per token (forward + backward) at a sequence length.
  virtual double flops_per_token(int64_t seq_len) const = 0;
  // Module path pattern -> how TP splits it. Paths are the model's module
  // paths, `*` standing for any block index: "layers.*.attention.wq",
  // "tok_embeddings", "norm", "output". Empty: the model has no TP plan.
  virtual std::map<std::string, TpStyle> tp_plan() const { return {}; }
  // The sizes a TP degree must divide (heads, kv heads, FFN width, vocab).
  virtual std::vector<ShardableSize> tp_sizes() const { return {}; }
  // Hugging Face interop: Titan parameter name -> HF name (empty: the
  // model has no HF counterpart), the conversion of one whole tensor each
  // way (e.g. Llama's q/k rotary permutation), and HF's config.json text.
  virtual std::map<std::string, std::string> hf_names() const { return {}; }
  virtual at::Tensor to_hf(const std::string& /*name*/, const at::Tensor& tensor) const { return tensor; }
  virtual at::Tensor from_hf(const std::string& /*name*/, const at::Tensor& tensor) const { return tensor; }
  virtual std::string hf_config_json() const { return {}; }
  // Whether the output head is the embedding matrix (enable_weight_tying):
  // the trainer refuses layouts that would split the two (pipeline stages,
  // tensor parallelism).
  virtual bool ties_embeddings() const { return false; }
  // Whether the stage with the output head needs the embedding matrix too:
  // a tied head, or DeepSeek-V3's multi-token prediction (which embeds the
  // tokens ahead there). A pipeline then keeps tok_embeddings on the last
  // stage as well, the two copies' gradients summed.
  virtual bool head_needs_embeddings() const { return ties_embeddings(); }
};

}  // namespace titan
