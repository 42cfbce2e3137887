// Qwen3 hyper-parameters and the named flavors (TorchTitan's qwen3 shapes).
// Plugin-private: only the qwen3 plugin's own files include this header.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/moe.hpp"

namespace titan::qwen3 {

struct Qwen3Args {
  int64_t dim = 1024;
  int64_t n_layers = 28;
  int64_t n_heads = 16;
  int64_t n_kv_heads = 8;
  int64_t head_dim = 128;        // not dim / n_heads: Qwen3 sets it apart
  int64_t hidden_dim = 3072;     // the dense blocks' FFN width
  int64_t vocab_size = 151936;
  double norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  int64_t max_seq_len = 4096;    // length of the rotary tables
  // The output head is the embedding matrix (the small dense models, as
  // HF's and TorchTitan's; model.enable_weight_tying).
  bool tie_embeddings = false;
  bool depth_init = true;        // out-projection std shrinks with layer id
  bool moe = false;              // every block's FFN is a MoE layer
  MoEOptions moe_options;        // when moe: Qwen3's softmax, route_norm, gates after the experts
};

std::vector<std::string> flavor_names();
// Throws std::out_of_range for an unknown flavor.
Qwen3Args flavor_args(const std::string& flavor);
// What is wrong with the args, as {option key, message}; both empty if nothing.
std::pair<std::string, std::string> find_problem(const Qwen3Args& args);

}  // namespace titan::qwen3
