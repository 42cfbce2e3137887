// Llama 3 hyper-parameters and the named flavors (TorchTitan's shapes).
// Plugin-private: only the llama3 plugin's own files include this header.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::llama3 {

// Llama 3.1 rotary frequency scaling (Meta's reference values).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

struct Llama3Args {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 32;
  int64_t vocab_size = 128256;
  int64_t multiple_of = 256;         // SwiGLU hidden size is rounded up to this
  double ffn_dim_multiplier = 0.0;   // <= 0: none
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  bool rope_scaling = true;          // TorchTitan applies it for every flavor
  RopeScaling scaling;
  int64_t max_seq_len = 131072;      // length of the rotary tables
  bool depth_init = true;            // out-projection std scales with layer id
  bool tie_embeddings = false;       // the output head is the embedding matrix (Llama 3.2 1B and 3B)

  int64_t head_dim() const { return dim / n_heads; }
  int64_t ffn_hidden_dim() const;
};

// TorchTitan's rule: 2/3 of 4*dim, times the multiplier, rounded up.
int64_t compute_ffn_hidden_dim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);

std::vector<std::string> flavor_names();
// Throws std::out_of_range for an unknown flavor.
Llama3Args flavor_args(const std::string& flavor);
// What is wrong with the args, as {option key, message}; both empty if nothing.
std::pair<std::string, std::string> find_problem(const Llama3Args& args);

}  // namespace titan::llama3
