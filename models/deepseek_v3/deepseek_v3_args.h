// DeepSeek-V3 hyper-parameters and the named flavors (TorchTitan's
// deepseekv3_args). Plugin-private: only the deepseek_v3 plugin's own files
// include this header.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/moe.hpp"

namespace titan::deepseek_v3 {

struct DeepSeekV3Args {
  int64_t vocab_size = 102400;
  int64_t dim = 2048;
  int64_t inter_dim = 10944;      // the dense blocks' FFN width (the MoE experts' is moe_options.hidden_dim)
  int64_t n_layers = 27;
  int64_t n_dense_layers = 1;     // blocks 0 .. n_dense_layers-1 are dense, the rest MoE
  int64_t n_heads = 16;
  double norm_eps = 1e-5;         // block norms and MLA's kv_norm / q_norm
  // TorchTitan builds the final norm as nn.RMSNorm(dim) with no eps, which
  // is float32's machine epsilon (2^-23), not norm_eps.
  double final_norm_eps = 1.1920928955078125e-07;
  MoEOptions moe_options;         // sigmoid or softmax router, shared experts, gates after the experts
  // Multi-head latent attention.
  int64_t q_lora_rank = 0;        // 0: one wq; else wq_a -> q_norm -> wq_b
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  // Rotary tables cover max_seq_len positions. TorchTitan sets it to
  // training.seq_len; YaRN scaling (and its softmax mscale) applies when it
  // exceeds original_seq_len.
  int64_t max_seq_len = 4096;
  int64_t original_seq_len = 4096;
  double rope_theta = 10000.0;
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;

  // Multi-token prediction (TorchTitan's): num_mtp_layers blocks after the
  // main model, depth k predicting token i + 1 + k; their loss, averaged
  // over the depths, joins the main loss times mtp_scale.
  int64_t num_mtp_layers = 0;
  double mtp_scale = 0.3;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool yarn() const { return max_seq_len > original_seq_len; }
  // qk_head_dim^-0.5, times (0.1 * mscale * ln(rope_factor) + 1)^2 under YaRN.
  double softmax_scale() const;
};

std::vector<std::string> flavor_names();
// Throws std::out_of_range for an unknown flavor.
DeepSeekV3Args flavor_args(const std::string& flavor);
// What is wrong with the args, as {option key, message}; both empty if nothing.
std::pair<std::string, std::string> find_problem(const DeepSeekV3Args& args);

}  // namespace titan::deepseek_v3
