// GPT-OSS hyper-parameters and the named flavors (TorchTitan's gpt_oss
// args; OpenAI's gpt-oss-20b and gpt-oss-120b shapes). Plugin-private: only
// the gpt_oss plugin's own files include this header.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/moe.hpp"

namespace titan::gpt_oss {

struct GptOssArgs {
  int64_t dim = 2880;
  int64_t n_layers = 24;
  int64_t n_heads = 64;
  int64_t n_kv_heads = 8;
  int64_t head_dim = 64;          // not dim / n_heads: GPT-OSS sets it apart
  int64_t vocab_size = 201088;
  double norm_eps = 1e-5;
  // Blocks 0, 2, 4, ... attend to the last `sliding_window` tokens (the
  // query's own included), the odd ones to every earlier token.
  int64_t sliding_window = 128;
  // Rotary tables cover max_seq_len positions, YaRN-scaled from
  // original_seq_len by rope_factor (always, as HF and TorchTitan do).
  int64_t max_seq_len = 131072;
  int64_t original_seq_len = 4096;
  double rope_theta = 150000.0;
  double rope_factor = 32.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // The experts' clamped SwiGLU: gate clamped above, up on both sides.
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;
  bool depth_init = true;         // init std shrinks with layer id (TorchTitan's)
  MoEOptions moe_options;         // softmax router with a bias, top-k renormalized, gates after the experts

  // YaRN's attention scale: (0.1 ln(rope_factor) + 1), applied to q and k
  // (HF scales cos and sin by it); 1 without scaling.
  double mscale() const;
  // head_dim^-0.5 * mscale^2: the softmax scale of the attention logits.
  double softmax_scale() const;
  // Whether block `layer` attends through the sliding window.
  bool sliding(int64_t layer) const { return sliding_window > 0 && layer % 2 == 0; }
};

std::vector<std::string> flavor_names();
// Throws std::out_of_range for an unknown flavor.
GptOssArgs flavor_args(const std::string& flavor);
// What is wrong with the args, as {option key, message}; both empty if nothing.
std::pair<std::string, std::string> find_problem(const GptOssArgs& args);

}  // namespace titan::gpt_oss
