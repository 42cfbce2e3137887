// Forward passes of the DeepSeek-V3 layers and the model (TorchTitan's
// deepseek_v3 math): MLA with interleaved-pair RoPE (core's Rotary, as
// TorchTitan's complex multiply) on the rope part only.
#include "deepseek_v3_model.h"

#include <ATen/ATen.h>

#include <cmath>

#include "titan/error.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"

namespace titan::deepseek_v3 {

namespace {

// YaRN's correction range: the dims whose wavelengths are between beta_fast
// and beta_slow rotations over original_seq_len (DeepSeek's reference).
double correction_dim(double rotations, double dim, double base, double seq_len) {
  return dim * std::log(seq_len / (rotations * 2 * M_PI)) / (2 * std::log(base));
}

}  // namespace

std::pair<at::Tensor, at::Tensor> rope_tables(const DeepSeekV3Args& args) {
  const int64_t dim = args.qk_rope_head_dim;
  at::Tensor exponents = at::arange(0, dim, 2, at::kFloat) / static_cast<double>(dim);
  at::Tensor freqs = at::reciprocal(at::pow(args.rope_theta, exponents));
  if (args.yarn()) {
    const double d = static_cast<double>(dim), base = args.rope_theta, original = static_cast<double>(args.original_seq_len);
    double low = std::max(std::floor(correction_dim(args.beta_fast, d, base, original)), 0.0);
    double high = std::min(std::ceil(correction_dim(args.beta_slow, d, base, original)), d - 1);
    if (low == high) high += 0.001;
    at::Tensor ramp = at::clamp((at::arange(dim / 2, at::kFloat) - low) / (high - low), 0, 1);
    at::Tensor smooth = 1 - ramp;
    freqs = freqs / args.rope_factor * (1 - smooth) + freqs * smooth;
  }
  at::Tensor angles = at::outer(at::arange(args.max_seq_len, at::kLong).to(at::kFloat), freqs);
  return {angles.cos(), angles.sin()};
}

Attention::Attention(const DeepSeekV3Args& args, const at::TensorOptions& options)
    : args_(args), q_scale_(args.softmax_scale() * std::sqrt(static_cast<double>(args.qk_head_dim()))) {
  const int64_t q_width = args.n_heads * args.qk_head_dim();
  if (args.q_lora_rank == 0) {
    register_module("wq", std::make_shared<Linear>(args.dim, q_width, options));
  } else {
    register_module("wq_a", std::make_shared<Linear>(args.dim, args.q_lora_rank, options));
    register_module("q_norm", std::make_shared<RMSNorm>(args.q_lora_rank, args.norm_eps, options));
    register_module("wq_b", std::make_shared<Linear>(args.q_lora_rank, q_width, options));
  }
  register_module("wkv_a", std::make_shared<Linear>(args.dim, args.kv_lora_rank + args.qk_rope_head_dim, options));
  register_module("kv_norm", std::make_shared<RMSNorm>(args.kv_lora_rank, args.norm_eps, options));
  register_module("wkv_b", std::make_shared<Linear>(
                               args.kv_lora_rank, args.n_heads * (args.qk_nope_head_dim + args.v_head_dim), options));
  register_module("wo", std::make_shared<Linear>(args.n_heads * args.v_head_dim, args.dim, options));
  register_module("rope", std::make_shared<Rotary>());
  register_module("sdpa", std::make_shared<AttentionCore>());
}

at::Tensor Attention::forward(const at::Tensor& x, const AttentionContext& context) {
  const int64_t nope = args_.qk_nope_head_dim, rope_dim = args_.qk_rope_head_dim, v_dim = args_.v_head_dim;
  const int64_t batch = x.size(0), seq = x.size(1);
  at::Tensor q = args_.q_lora_rank == 0
                     ? child_layer(*this, "wq")->forward(x)
                     : child_layer(*this, "wq_b")->forward(
                           child_layer(*this, "q_norm")->forward(child_layer(*this, "wq_a")->forward(x)));
  // Heads from the widths (tensor parallelism would shard them).
  q = q.view({batch, seq, -1, args_.qk_head_dim()});
  auto rope = std::dynamic_pointer_cast<Rotary>(find_module(*this, "rope"));
  if (!rope) throw Error("deepseek_v3: rotary embedding 'rope' is missing or not a titan::Rotary");
  at::Tensor q_pe = rope->forward(q.narrow(3, nope, rope_dim).contiguous(), context.cos, context.sin);
  q = at::cat({q.narrow(3, 0, nope), q_pe}, 3);

  // The kv latent and one rotary key part shared by every head.
  at::Tensor kv = child_layer(*this, "wkv_a")->forward(x);
  at::Tensor k_pe = rope->forward(kv.narrow(2, args_.kv_lora_rank, rope_dim).unsqueeze(2).contiguous(), context.cos,
                                  context.sin);
  kv = child_layer(*this, "wkv_b")->forward(child_layer(*this, "kv_norm")->forward(kv.narrow(2, 0, args_.kv_lora_rank)));
  kv = kv.view({batch, seq, -1, nope + v_dim});
  const int64_t heads = kv.size(2);
  at::Tensor k = at::cat({kv.narrow(3, 0, nope), k_pe.expand({batch, seq, heads, rope_dim})}, 3);
  at::Tensor v = kv.narrow(3, nope, v_dim);
  if (q_scale_ != 1.0) q = q * q_scale_;  // (c q) . k = c (q . k): YaRN's softmax scale

  auto core = std::dynamic_pointer_cast<AttentionCore>(find_module(*this, "sdpa"));
  if (!core) throw Error("deepseek_v3: attention core 'sdpa' is missing or not a titan::AttentionCore");
  at::Tensor out = attend(*core, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), context);
  out = out.transpose(1, 2).contiguous().view({batch, seq, -1});
  return child_layer(*this, "wo")->forward(out);
}

Transformer::Transformer(const DeepSeekV3Args& args, const c10::Device& device)
    : Decoder({"deepseek_v3", args.vocab_size, args.dim, args.n_layers, args.max_seq_len, args.qk_rope_head_dim,
               args.final_norm_eps,
               " (beyond original_seq_len " + std::to_string(args.original_seq_len) +
                   " YaRN scaling applies, as in TorchTitan)"},
              device,
              [args](int64_t layer_id, const at::TensorOptions& options) {
                // The first n_dense_layers blocks are dense.
                const MoEOptions* moe = layer_id >= args.n_dense_layers ? &args.moe_options : nullptr;
                return DecoderBlock::make(layer_id, std::make_shared<Attention>(args, options), args.dim,
                                          args.norm_eps, args.inter_dim, moe, options);
              },
              [args] { return rope_tables(args); }),
      args_(args) {
  if (args.num_mtp_layers > 0) {
    auto options = at::TensorOptions().dtype(at::kFloat).device(device);
    auto mtp_layers = register_module("mtp_layers", torch::nn::ModuleDict());
    for (int64_t k = 0; k < args.num_mtp_layers; ++k) {
      mtp_layers->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
          {std::to_string(k), std::make_shared<MtpBlock>(args, k, options)}});
    }
    set_objective(mtp_objective(args.num_mtp_layers, args.mtp_scale));
  }
  add_moe_step_hook(*this);  // the trainer balances the experts before each optimizer step (MTP's routers too)
}

}  // namespace titan::deepseek_v3
