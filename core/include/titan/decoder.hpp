// The decoder skeleton every rotary transformer model fills: token
// embeddings, the blocks (each run through run_block, so plugins wrap them),
// the final norm and the output head, the rotary tables looked up by
// position, the pipeline and context-parallel contract, and the init of the
// skeleton's own parameters. A model brings its attention, its feed-forward
// (dense or MoE), its rotary tables and its init rules for what is inside a
// block: llama3, qwen3 and deepseek_v3 are each that and their args and HF
// names.
//
// Module names are TorchTitan's and the checkpoints': tok_embeddings,
// layers.<i>.{attention, attention_norm, ffn_norm, feed_forward | moe},
// norm, output; the buffers freqs_cos and freqs_sin.
//
// The contract with plugins: every layer is looked up by name at each call
// (a plugin may swap one by path, or drop tok_embeddings / norm / output as a
// pipeline stage does: a stage without tok_embeddings takes hidden states);
// positions() (context parallelism) pick the rotary rows of this rank's
// piece of the sequence; document positions (CausalLM::run) restart them at
// each document and make attention block-causal.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/error.hpp"
#include "titan/model.hpp"

namespace titan {

struct MoEOptions;
class AttentionCore;
class Rotary;

// The keys and values of the tokens a decoder has already seen, per block,
// so that generation runs each new token alone (Decoder::forward(tokens,
// cache)). Room for `capacity` positions is taken at a block's first keys.
class KvCache {
 public:
  explicit KvCache(int64_t capacity) : capacity_(capacity) {}
  // Positions cached: the next forward's tokens start here.
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  // Appends block `layer`'s keys and values of this forward's tokens (k, v:
  // [batch, heads, seq, head_dim]) and returns the block's whole keys and
  // values so far.
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // The decoder's: after a forward, its `seq` tokens are cached.
  void advance(int64_t seq);

 private:
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<std::pair<at::Tensor, at::Tensor>> layers_;
};

// What each block's attention takes of this forward's sequence: the rotary
// rows of its tokens (cos, sin: [seq, rope_dim / 2], or [batch, seq,
// rope_dim / 2] when each document starts at position 0) and, for
// block-causal attention, the documents of the whole sequence (undefined:
// causal; AttentionCore::forward says how a core reads them). When
// generating, the cache of earlier tokens' keys and values and the block
// that runs (`layer`, set by DecoderBlock).
struct AttentionContext {
  at::Tensor cos, sin;
  at::Tensor documents;
  KvCache* cache = nullptr;
  int64_t layer = -1;
};

// An attention's scores and weighted values, q, k, v: [batch, heads, seq,
// head_dim]: the core's causal attention, or, with a cache, this forward's
// queries over the earlier tokens' keys and values and their own. Every
// DecoderAttention calls it, so that each honours the cache.
at::Tensor attend(AttentionCore& core, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const AttentionContext& context);

// A block's attention: the normalized hidden states and this forward's
// AttentionContext in, the block's update out.
class DecoderAttention : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x, const AttentionContext& context) = 0;
};

// Grouped-query attention (Llama 3's; with q/k norms, Qwen3's): the
// projections wq, wk, wv, wo, optionally an RMSNorm on each head's q and k
// (q_norm, k_norm), the rotary embedding `rope` and the attention core
// `sdpa`, each looked up by name at every call. Head counts come from the
// projections' widths, so tensor parallelism's shards need nothing else.
class GroupedQueryAttention : public DecoderAttention {
 public:
  struct Shape {
    std::string model;  // in messages
    int64_t dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
    double qk_norm_eps = 0;  // > 0: q_norm and k_norm with this eps
  };
  GroupedQueryAttention(const Shape& shape, std::shared_ptr<Rotary> rope, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionContext& context) override;

 private:
  std::string model_;
  int64_t head_dim_;
  bool qk_norm_;
};

// A pre-norm block: h = x + attention(attention_norm(x));
// out = h + ffn(ffn_norm(h)), the feed-forward registered as `ffn_name`
// ("feed_forward" for a dense SwiGLU, "moe" for core's MoE layer).
class DecoderBlock : public torch::nn::Module {
 public:
  DecoderBlock(int64_t layer_id, std::shared_ptr<DecoderAttention> attention, std::string ffn_name,
               std::shared_ptr<torch::nn::Module> ffn, int64_t dim, double norm_eps, const at::TensorOptions& options);
  // With a dense SwiGLU of `hidden_dim` (`feed_forward`), or, given `moe`,
  // core's MoE layer (`moe`).
  static std::shared_ptr<DecoderBlock> make(int64_t layer_id, std::shared_ptr<DecoderAttention> attention,
                                            int64_t dim, double norm_eps, int64_t hidden_dim, const MoEOptions* moe,
                                            const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionContext& context);
  const int64_t layer_id;

 private:
  std::string ffn_name_;
};

// Aggregate-initialized by the models in this order:
// {model, vocab_size, dim, n_layers, max_seq_len, rope_dim, final_norm_eps,
// rope_note, tie_embeddings}.
struct DecoderShape {
  std::string model;  // the model plugin's name, in messages
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t max_seq_len = 0;  // rows of the rotary tables
  int64_t rope_dim = 0;     // the rotated dims of a head: the tables hold rope_dim / 2 angles
  double final_norm_eps = 1e-5;
  std::string rope_note;  // added to the past-the-tables error (e.g. where YaRN scaling applies)
  // The output head is the embedding matrix (TiedOutput): no output.weight.
  bool tie_embeddings = false;
};

class Decoder : public CausalLM {
 public:
  using BlockFactory = std::function<std::shared_ptr<DecoderBlock>(int64_t layer_id, const at::TensorOptions& options)>;
  // cos and sin of the rotary angles, fp32 [max_seq_len, rope_dim / 2], on CPU.
  using RopeTables = std::function<std::pair<at::Tensor, at::Tensor>()>;

  // On the meta device no memory is used; elsewhere the rotary tables are
  // computed and the parameters hold undefined values until init_weights().
  Decoder(DecoderShape shape, const c10::Device& device, const BlockFactory& make_block, RopeTables rope_tables);

  // With document positions (CausalLM::run), rotary rows by position
  // within the document and block-causal attention.
  at::Tensor forward(const at::Tensor& tokens) override;
  // Generation: the logits of `tokens`, which follow the cache's tokens
  // (rotary rows from position cache.length()); their keys and values are
  // added to the cache. One process, no documents, no positions set.
  at::Tensor forward(const at::Tensor& tokens, KvCache& cache);
  bool supports_documents() const override { return true; }
  int64_t num_blocks() const override;
  std::shared_ptr<torch::nn::Module> block(int64_t index) override;
  // The rotary tables (a model with more buffers, e.g. MoE routers', adds its own).
  void init_buffers() override;

 protected:
  // After the last block, on h (the blocks' output): the final norm and the
  // output head, each when this model or stage holds it. A model with more
  // heads (DeepSeek-V3's multi-token prediction) overrides it; `tokens` are
  // forward()'s input, `context` what the blocks attended with.
  virtual at::Tensor head(const at::Tensor& h, const at::Tensor& tokens, const AttentionContext& context);
  // TorchTitan's init of the skeleton's parameters: tok_embeddings from
  // N(0, 1), output from N(0, 1/sqrt(dim)) truncated at 3 std (a tied
  // embedding too: it is the head's weight), every norm's weight 1. False
  // for a parameter the model's own rule draws.
  bool init_skeleton_parameter(const std::string& name, at::Tensor& values, at::Generator& generator) const;
  // TorchTitan's std of a block's output projections: 0.02 / sqrt(2 *
  // depth), depth the block's index + 1 (depth_init) or n_layers.
  double depth_std(const std::string& name, bool depth_init) const;

 private:
  DecoderShape shape_;
  RopeTables rope_tables_;
  torch::nn::ModuleDict layers_;
  at::Tensor freqs_cos_;
  at::Tensor freqs_sin_;
  KvCache* cache_ = nullptr;  // set while forward(tokens, cache) runs
};

// The ModelSpec part every decoder model shares: its name, flavor and args
// (the vocabulary set from the tokenizer). A model's spec derives from it
// and adds build(), its sizes and FLOPs, TP plan and HF names. Header-only:
// compiled into the model plugin.
template <typename Args>
class DecoderSpec : public ModelSpec {
 public:
  DecoderSpec(std::string model, std::string flavor, const Args& args)
      : model_(std::move(model)), flavor_(std::move(flavor)), args_(args) {}
  std::string flavor() const override { return flavor_; }
  int64_t vocab_size() const override { return args_.vocab_size; }
  void set_vocab_size(int64_t vocab_size) override {
    if (vocab_size <= 0) throw Error(model_ + ": vocabulary size must be positive, got " + std::to_string(vocab_size));
    args_.vocab_size = vocab_size;
  }
  const Args& args() const { return args_; }

 protected:
  std::string model_;
  std::string flavor_;
  Args args_;
};

}  // namespace titan
