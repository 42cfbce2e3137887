// Llama 3 on core's decoder skeleton: its rotary tables (TorchTitan's
// math, Llama 3.1 scaling) and its blocks.
#include "llama3_model.h"

#include <ATen/ATen.h>

#include <cmath>

#include "titan/layers.hpp"

namespace titan::llama3 {

std::pair<at::Tensor, at::Tensor> rope_tables(const Llama3Args& args) {
  // Same fp32 steps as TorchTitan's precompute_freqs_cis / apply_scaling.
  int64_t head_dim = args.head_dim();
  at::Tensor exponents = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor freqs = at::reciprocal(at::pow(args.rope_theta, exponents));
  if (args.rope_scaling) {
    const RopeScaling& s = args.scaling;
    double low_freq_wavelen = s.original_max_position / s.low_freq_factor;
    double high_freq_wavelen = s.original_max_position / s.high_freq_factor;
    at::Tensor wavelen = at::reciprocal(freqs) * (2 * M_PI);
    at::Tensor scaled = at::where(wavelen > low_freq_wavelen, freqs / s.factor, freqs);
    at::Tensor smooth = (at::reciprocal(wavelen) * s.original_max_position - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
    at::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
    freqs = at::where((wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen), blended, scaled);
  }
  at::Tensor positions = at::arange(args.max_seq_len, at::kLong).to(at::kFloat);
  at::Tensor angles = at::outer(positions, freqs);
  return {angles.cos(), angles.sin()};
}

namespace {

GroupedQueryAttention::Shape attention_shape(const Llama3Args& args) {
  return {"llama3", args.dim, args.n_heads, args.n_kv_heads, args.head_dim()};
}

}  // namespace

Transformer::Transformer(const Llama3Args& args, const c10::Device& device)
    : Decoder({"llama3", args.vocab_size, args.dim, args.n_layers, args.max_seq_len, args.head_dim(), args.norm_eps,
               /*rope_note=*/"", args.tie_embeddings},
              device,
              [args](int64_t layer_id, const at::TensorOptions& options) {
                auto attention =
                    std::make_shared<GroupedQueryAttention>(attention_shape(args), std::make_shared<Rotary>(), options);
                return DecoderBlock::make(layer_id, attention, args.dim, args.norm_eps, args.ffn_hidden_dim(), nullptr,
                                          options);
              },
              [args] { return rope_tables(args); }),
      args_(args) {}

}  // namespace titan::llama3
