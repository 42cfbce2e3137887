// The layer seam: the building blocks models are made of, in core so that
// plugins can recognize them (a float8 plugin swaps Linear, fused kernels
// swap RMSNorm, tensor parallelism shards both) and replace them by module
// path without the model knowing. A model calls its layers through Layer,
// looked up by name at every call (child_layer), so a swap takes effect.
#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <string>

namespace titan {

// One tensor in, one out: what every swappable layer is.
class Layer : public torch::nn::Module {
 public:
  ~Layer() override;
  virtual at::Tensor forward(const at::Tensor& input) = 0;
};

// y = x W^T (+ b); weight [out_features, in_features] and, with `bias`, a
// bias [out_features], as torch.nn.Linear. Most models have no bias
// (undefined); GPT-OSS's attention has one.
class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, const at::TensorOptions& options, bool bias = false);
  at::Tensor forward(const at::Tensor& input) override;
  at::Tensor weight;
  at::Tensor bias;
};

// tokens (int64) -> rows of weight [vocab_size, dim].
class Embedding : public Layer {
 public:
  Embedding(int64_t vocab_size, int64_t dim, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& tokens) override;
  at::Tensor weight;
};

// The output head tied to the token embeddings (model.enable_weight_tying):
// logits = x E^T, E the weight of `owner`'s `tok_embeddings` looked up at
// every call (whatever data parallelism has gathered there). It holds no
// parameter: the model has one matrix, its gradient the sum of both uses.
class TiedOutput : public Layer {
 public:
  // `owner` (the model that registers this layer) outlives it.
  explicit TiedOutput(const torch::nn::Module& owner) : owner_(&owner) {}
  at::Tensor forward(const at::Tensor& input) override;

 private:
  const torch::nn::Module* owner_;
};

// Normalized in fp32 over the last dim, cast back, then scaled (TorchTitan's RMSNorm).
class RMSNorm : public Layer {
 public:
  RMSNorm(int64_t dim, double eps, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& input) override;
  at::Tensor weight;
  double eps;
};

// Each token's document ([batch, seq] int64: how many documents started at
// or before it in its row) from its position within its document (0 where
// one starts), as CausalLM::run receives them.
at::Tensor document_ids(const at::Tensor& document_positions);

// Causal attention of q [batch, heads, seq, head_dim] over k, v [batch,
// kv_heads, seq, head_dim] (grouped-query when kv_heads < heads): the core
// a model calls as `sdpa`, which context parallelism or selective
// checkpointing may replace. `documents` (undefined: causal) are the
// document ids of the whole sequence ([batch, whole seq], document_ids()):
// a query then sees only earlier keys of its own document. A core that
// holds a piece of the sequence (context parallelism) finds its tokens'
// documents there by their global positions.
class AttentionCore : public torch::nn::Module {
 public:
  ~AttentionCore() override;
  virtual at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& documents);
};

// Rotary position embedding of x [batch, seq, heads, head_dim] by the first
// seq rows of cos/sin [>= seq, head_dim / 2], or, with documents, by each
// row's own cos/sin [batch, seq, head_dim / 2], rotating interleaved pairs
// (x[2i], x[2i+1]) in fp32 (Meta's layout): a seam fused kernels replace.
class Rotary : public torch::nn::Module {
 public:
  ~Rotary() override;
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // cos or sin as fp32 [1 or batch, seq, 1, half], to broadcast over x's heads.
  static at::Tensor rows_for(const at::Tensor& table, const at::Tensor& x);

 protected:
  // forward() of [batch, seq, half] tables through [seq, half] ones: x's
  // tokens as one row, each with its own table row (the rotation is per
  // token), for a kernel that takes one table for every row.
  at::Tensor forward_by_token(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
};

// Rotary embedding that rotates halves (dims i and i + head_dim/2
// together: rotate_half, HF's layout for Qwen3 and GPT-OSS), not the
// interleaved pairs of Rotary. A subclass, so plugins that swap exactly
// titan::Rotary (interleaved kernels) leave it.
class RotateHalfRotary : public Rotary {
 public:
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) override;
};

// silu(gate) * up, the elementwise part of a SwiGLU feed-forward: a seam
// fused kernels replace.
class SwiGLU : public torch::nn::Module {
 public:
  ~SwiGLU() override;
  virtual at::Tensor forward(const at::Tensor& gate, const at::Tensor& up);
};

// A layer that replaces another and keeps its parameter names: it adopts the
// inner layer's direct parameters, buffers and children under the same
// names, so `layers.3.attention.wq.weight` stays that name for optimizers,
// checkpoints and HF export whatever wraps it.
class LayerWrapper : public Layer {
 public:
  explicit LayerWrapper(std::shared_ptr<Layer> inner);
  Layer& inner() const { return *inner_; }
  const std::shared_ptr<Layer>& inner_ptr() const { return inner_; }

 private:
  std::shared_ptr<Layer> inner_;
};

}  // namespace titan
