// DeepSeekV3Spec: sizes and FLOPs from shapes alone (671B is instant), as
// TorchTitan's get_moe_model_nparams_and_flops counts them: every expert in
// the size, only the top_k routed ones (and the router and shared experts)
// in the FLOPs, attention as 6 x layers x heads x (qk + v head dims) x seq.
#include "deepseek_v3_spec.h"

#include "deepseek_v3_model.h"
#include "titan/error.hpp"

namespace titan::deepseek_v3 {

std::shared_ptr<CausalLM> DeepSeekV3Spec::build(const c10::Device& device) const {
  return std::make_shared<Transformer>(args_, device);
}

namespace {

struct Counts {
  int64_t dense = 0;    // every block's attention and norms, the dense FFNs
  int64_t experts = 0;  // routed experts of all MoE blocks
  int64_t always = 0;   // routers and shared experts (active for every token)
};

Counts block_counts(const DeepSeekV3Args& a) {
  const int64_t heads = a.n_heads, dim = a.dim;
  int64_t q = a.q_lora_rank == 0 ? dim * heads * a.qk_head_dim()
                                 : dim * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * a.qk_head_dim();
  int64_t attention = q + dim * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +
                      a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim) + heads * a.v_head_dim * dim;
  Counts c;
  c.dense = a.n_layers * (attention + 2 * dim) + a.n_dense_layers * 3 * dim * a.inter_dim;
  const int64_t moe_layers = a.n_layers - a.n_dense_layers;
  const MoEOptions& m = a.moe_options;
  c.experts = moe_layers * 3 * m.num_experts * m.hidden_dim * dim;
  c.always = moe_layers * (dim * m.num_experts + 3 * dim * m.hidden_dim * m.num_shared_experts);
  return c;
}

// The multi-token prediction blocks: each one block of the last main
// block's kind, three norms and eh_proj [dim, 2 dim].
Counts mtp_counts(const DeepSeekV3Args& a) {
  if (a.num_mtp_layers == 0) return {};
  DeepSeekV3Args one = a;
  one.n_layers = 1;
  one.n_dense_layers = a.n_layers > a.n_dense_layers ? 0 : 1;
  Counts c = block_counts(one);
  c.dense += 3 * a.dim + 2 * a.dim * a.dim;
  return {c.dense * a.num_mtp_layers, c.experts * a.num_mtp_layers, c.always * a.num_mtp_layers};
}

Counts all_counts(const DeepSeekV3Args& a) {
  Counts c = block_counts(a), mtp = mtp_counts(a);
  return {c.dense + mtp.dense, c.experts + mtp.experts, c.always + mtp.always};
}

}  // namespace

int64_t DeepSeekV3Spec::num_params(bool include_embedding) const {
  Counts c = all_counts(args_);
  int64_t total = c.dense + c.experts + c.always + args_.dim + args_.vocab_size * args_.dim;  // + norm + output
  return include_embedding ? total + args_.vocab_size * args_.dim : total;
}

double DeepSeekV3Spec::flops_per_token(int64_t seq_len) const {
  Counts c = all_counts(args_);
  const MoEOptions& m = args_.moe_options;
  int64_t active_experts = m.num_experts > 0 ? c.experts * m.top_k / m.num_experts : 0;  // TorchTitan's floor
  int64_t active = num_params(false) - c.experts + active_experts;
  // Each MTP depth runs the shared head once more and attends as a block does.
  active += args_.num_mtp_layers * args_.vocab_size * args_.dim;
  double attention = 6.0 * static_cast<double>(args_.n_layers + args_.num_mtp_layers) * static_cast<double>(args_.n_heads) *
                     static_cast<double>(args_.qk_head_dim() + args_.v_head_dim) * static_cast<double>(seq_len);
  return 6.0 * static_cast<double>(active) + attention;
}

std::map<std::string, TpStyle> DeepSeekV3Spec::tp_plan() const {
  // TorchTitan's: each rank's heads through the colwise projections; the
  // kv latent (and the low-rank q) run whole on every rank, since every
  // head needs all of it, with their gradients summed over tp; MoE blocks
  // are split by the TP plugin itself.
  std::map<std::string, TpStyle> plan = {{"tok_embeddings", TpStyle::rowwise},
                                         {"layers.*.attention_norm", TpStyle::sequence_parallel_norm},
                                         {"layers.*.attention.wkv_a", TpStyle::no_parallel},
                                         {"layers.*.attention.kv_norm", TpStyle::no_parallel},
                                         {"layers.*.attention.wkv_b", TpStyle::colwise},
                                         {"layers.*.attention.wo", TpStyle::rowwise},
                                         {"layers.*.ffn_norm", TpStyle::sequence_parallel_norm},
                                         {"norm", TpStyle::sequence_parallel_norm},
                                         {"output", TpStyle::colwise}};
  if (args_.q_lora_rank == 0) {
    plan["layers.*.attention.wq"] = TpStyle::colwise;
  } else {
    plan["layers.*.attention.wq_a"] = TpStyle::no_parallel;
    plan["layers.*.attention.q_norm"] = TpStyle::no_parallel;
    plan["layers.*.attention.wq_b"] = TpStyle::colwise;
  }
  if (args_.n_dense_layers > 0) {
    plan["layers.*.feed_forward.w1"] = TpStyle::colwise;
    plan["layers.*.feed_forward.w3"] = TpStyle::colwise;
    plan["layers.*.feed_forward.w2"] = TpStyle::rowwise;
  }
  return plan;
}

std::vector<ShardableSize> DeepSeekV3Spec::tp_sizes() const {
  std::vector<ShardableSize> sizes = {{"model.n_heads", "attention heads", args_.n_heads},
                                      {"model.tokenizer_path (its vocabulary)", "vocabulary size", args_.vocab_size}};
  if (args_.n_dense_layers > 0) sizes.push_back({"model.inter_dim", "dense FFN hidden size", args_.inter_dim});
  // Without expert parallelism the experts' width is split too (checked
  // when the layers are split: the TP plugin cannot see ep here).
  return sizes;
}

}  // namespace titan::deepseek_v3
