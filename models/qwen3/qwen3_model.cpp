// Qwen3 on core's decoder skeleton: its rotary tables (for core's
// rotate-half rotary), and its blocks (TorchTitan's qwen3 math).
#include "qwen3_model.h"

#include <ATen/ATen.h>

#include "titan/moe.hpp"

namespace titan::qwen3 {

std::pair<at::Tensor, at::Tensor> rope_tables(const Qwen3Args& args) {
  at::Tensor exponents = at::arange(0, args.head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(args.head_dim);
  at::Tensor freqs = at::reciprocal(at::pow(args.rope_theta, exponents));
  at::Tensor angles = at::outer(at::arange(args.max_seq_len, at::kLong).to(at::kFloat), freqs);
  return {angles.cos(), angles.sin()};
}

namespace {

// Qwen3's difference from Llama 3's attention: each head's q and k
// normalized first, and the rotate-half rotary.
GroupedQueryAttention::Shape attention_shape(const Qwen3Args& args) {
  return {"qwen3", args.dim, args.n_heads, args.n_kv_heads, args.head_dim, args.norm_eps};
}

}  // namespace

Transformer::Transformer(const Qwen3Args& args, const c10::Device& device)
    : Decoder({"qwen3", args.vocab_size, args.dim, args.n_layers, args.max_seq_len, args.head_dim, args.norm_eps,
               /*rope_note=*/"", args.tie_embeddings},
              device,
              [args](int64_t layer_id, const at::TensorOptions& options) {
                auto attention = std::make_shared<GroupedQueryAttention>(
                    attention_shape(args), std::make_shared<RotateHalfRotary>(), options);
                return DecoderBlock::make(layer_id, attention, args.dim, args.norm_eps, args.hidden_dim,
                                          args.moe ? &args.moe_options : nullptr, options);
              },
              [args] { return rope_tables(args); }),
      args_(args) {
  add_moe_step_hook(*this);  // the trainer balances the experts before each optimizer step
}

}  // namespace titan::qwen3
